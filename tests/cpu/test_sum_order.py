"""bf16's summation orders: "tile" (the order of AMX's TDPBF16PS) equals its plain NumPy model
(tests/support/sum_orders.py) bit for bit at every level this CPU runs, on the tile unit and
emulated, for any thread count; the option's scoping and environment variable; the tile
unit's permission and self-check, faked where this CPU has none, and the unit's path run on a
software tile unit (support/amx_emulated.py) where no CPU here has the unit."""

import ctypes
import importlib.util
import pathlib
import platform
import shutil
import subprocess
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import pypto
from pypto._kernels import amx
from pypto._kernels.dispatch import BUILT_LEVELS, CPU_LEVELS, kernel_info, load_level
from support import amx_emulated
from support.numerics import check_accuracy, make_problem, run_op
from support.sum_orders import dgrad_tile_order

RUNNABLE = [level for level in CPU_LEVELS if level in BUILT_LEVELS]
TOOLS = pathlib.Path(__file__).resolve().parents[2] / "tools"
HAS_AMX = "avx512_amx" in RUNNABLE

# n, cin, cout, hout, wout, kh, kw, strides, pads (top, left), dilations, hin, win
LAYERS = [
    (2, 40, 70, 6, 7, 3, 3, (1, 1), (1, 1), (1, 1), 6, 7),  # two co blocks, the second short
    (1, 16, 32, 5, 20, 1, 1, (1, 1), (0, 0), (1, 1), 5, 20),  # one block; rows of 16 + 4
    (2, 33, 45, 4, 5, 3, 3, (2, 2), (1, 1), (1, 1), 8, 9),  # stride 2, Cin 2x16 + 1
    (1, 8, 17, 5, 6, 2, 3, (2, 3), (0, 1), (2, 1), 11, 17),  # phases without taps, dilation
    (1, 20, 96, 9, 40, 1, 7, (1, 1), (0, 3), (1, 1), 9, 40),  # 1x7, wide rows
    (1, 3, 5, 3, 3, 3, 3, (1, 1), (2, 2), (1, 1), 5, 5),  # Cout < 32, padding > halo
    (2, 24, 40, 3, 1, 3, 1, (2, 2), (1, 0), (1, 1), 5, 1),  # stride 2, one column: no odd one
    (2, 3, 50, 12, 21, 7, 7, (2, 2), (3, 3), (1, 1), 23, 41),  # a stem: Cin 3, 7x7 stride 2
    (2, 20, 45, 6, 9, 1, 1, (1, 1), (0, 0), (1, 1), 6, 9),  # 1x1, Cin 16 + 4, Cout odd
    # Cin of 5 channel tiles: one emulated item short of its 8 (1 thread), items of one (2, 3)
    (3, 70, 33, 3, 5, 1, 1, (1, 1), (0, 0), (1, 1), 3, 5),  # dense tiles across 3 images
    (1, 80, 36, 4, 4, 3, 3, (2, 2), (1, 1), (1, 1), 8, 8),  # stride 2: both column phases
    (1, 40, 20, 33, 33, 1, 1, (1, 1), (0, 0), (1, 1), 33, 33),  # dx planes over 32 pages a block
    # the dot form's masked flat frames: tiles across images, both column phases, dilation,
    # a 7x1 tap column; odd sizes at stride 2 keep its frames (a phase's grid is not dy's)
    (8, 20, 40, 7, 7, 3, 3, (1, 1), (1, 1), (1, 1), 7, 7),
    (3, 24, 36, 7, 7, 3, 3, (2, 2), (1, 1), (1, 1), 14, 14),
    (2, 20, 40, 9, 9, 3, 3, (1, 1), (2, 2), (2, 2), 9, 9),
    (2, 16, 33, 17, 17, 7, 1, (1, 1), (3, 0), (1, 1), 17, 17),
    (1, 20, 40, 21, 32, 3, 3, (2, 2), (1, 1), (1, 1), 41, 63),
    # phases without taps run no item: their zeros are stored straight (whole odd rows of a
    # 1x1/2 layer in masked flat frames; a row phase of stride (2, 1))
    (2, 40, 70, 7, 7, 1, 1, (2, 2), (0, 0), (1, 1), 14, 14),
    (2, 20, 36, 5, 6, 1, 1, (2, 1), (0, 0), (1, 1), 10, 6),
]


def _arrays(layer, seed, scale=0.1):
    n, cin, cout, hout, wout, kh, kw = layer[:7]
    rng = np.random.default_rng(seed)
    dy = rng.standard_normal((n, cout, hout, wout)).astype(ml_dtypes.bfloat16)
    w = (rng.standard_normal((cout, cin, kh, kw)) * scale).astype(ml_dtypes.bfloat16)
    return dy, w


def _attrs(layer):
    (sh, sw), (pt, pl), (dh, dw) = layer[7:10]
    return (sh, sw, pt, pl, dh, dw)


def _model(layer, dy, w):
    return dgrad_tile_order(dy, w, layer[10:12], layer[7], layer[8], layer[9]).view(np.uint16)


def _kernel_tile(kernel, layer, dy, w, threads, use_amx, use_dot=True, lane_order=-1):
    n, cin = layer[0], layer[1]
    out = np.full((n, cin) + tuple(layer[10:12]), 0xFFFF, np.uint16)  # no stale zeros
    bits = dy.view(np.uint16), w.view(np.uint16)
    path = kernel.dgrad_tile(*bits, out, _attrs(layer), threads, use_amx, 0, use_dot, lane_order)
    return path, out


@pytest.fixture
def tile_unit_allowed():
    """This process may use the tile unit (it is a test of it): the OS's permission asked."""
    from pypto._kernels import features

    if not HAS_AMX:
        pytest.skip("no AMX tile unit on this CPU (or not built)")
    refused = features.request_amx_permission()
    if refused:
        pytest.skip(f"the OS refuses AMX tile data here (errno {refused})")


@pytest.mark.parametrize("level", RUNNABLE)
@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: "x".join(map(str, layer[:7])))
def test_tile_order_is_its_model_at_every_level(level, layer):
    """Emulated in fp32, and with the bf16 dot product where the level has it (the data here
    has no subnormal, so it serves)."""
    kernel = load_level(level)
    dy, w = _arrays(layer, seed=layer[2])
    expected = _model(layer, dy, w)
    forms = {"tile+emulated": False}
    if kernel.HAS_BF16_DOT:
        forms["tile+dot"] = True
    for form, use_dot in forms.items():
        for threads in (1, 2, 3):
            path, out = _kernel_tile(kernel, layer, dy, w, threads, False, use_dot)
            assert path == form
            np.testing.assert_array_equal(out, expected, err_msg=f"{form}, {threads} threads")


@st.composite
def tile_order_layers(draw):
    """A layer in LAYERS' form over the tile order's geometry: one to three co blocks (the
    last short), one or two emulated channel blocks (Cin past 128) with a short last channel
    tile, strides to 3 (phases with no tap), dilation 2, padding up to the kernel's reach, an
    input size anywhere in its range, images sharing tiles; small enough for the NumPy model"""
    n = draw(st.integers(1, 4))
    cin = draw(st.one_of(st.integers(1, 48), st.integers(120, 140)))
    cout = draw(st.integers(1, 70))
    axes = []
    for _ in range(2):
        k, s, d = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
        pad, out = draw(st.integers(0, (k - 1) * d)), draw(st.integers(1, 10))
        lo = (out - 1) * s - 2 * pad + (k - 1) * d + 1
        assume(lo + s - 1 >= 1)
        axes.append((k, s, d, pad, out, draw(st.integers(max(lo, 1), lo + s - 1))))
    (kh, sh, dh, pt, hout, hin), (kw, sw, dw, pl, wout, win) = axes
    assume(n * cin * hin * win * cout * kh * kw <= 3_000_000)  # the model: ~0.1 s
    return (n, cin, cout, hout, wout, kh, kw, (sh, sw), (pt, pl), (dh, dw), hin, win)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(
    tile_order_layers(),
    st.sampled_from([1, 2, 3, 5]),
    st.integers(0, 2**32 - 1),
    st.sampled_from([-1, 0, 1]),
)
def test_random_layers_are_the_model_at_every_level(layer, threads, seed, lane_order):
    """LAYERS' check on drawn layers: each level, fp32 and the dot form, a team of 1-5, masked
    flat frames' lanes as chosen, images one after another or interleaved"""
    dy, w = _arrays(layer, seed)
    expected = _model(layer, dy, w)
    for level in RUNNABLE:
        kernel = load_level(level)
        for use_dot in [False] + ([True] if kernel.HAS_BF16_DOT else []):
            path, out = _kernel_tile(kernel, layer, dy, w, threads, False, use_dot, lane_order)
            assert path == ("tile+dot" if use_dot else "tile+emulated")
            np.testing.assert_array_equal(out, expected, err_msg=f"{level} {path} {threads}t")


@pytest.mark.parametrize("level", RUNNABLE)
def test_the_layers_cover_every_layout_of_their_forms(level):
    """The cases above run each way a level lays dy out (tile_layout): frames; dense
    positions gathered; flat frames read in place; and, with AVX-512 or AVX2, flat frames with
    masked lanes, the images one after another or interleaved. A change of the choice that
    left a way untested fails here."""
    kernel = load_level(level)
    expected = {"frames", "dense", "flat"} if kernel.DENSE_FAST else {"frames"}
    if kernel.LANES:
        expected |= {"masked", "interleaved"}
    for form in ["f32"] + (["dot"] if kernel.HAS_BF16_DOT else []):
        seen = {kernel.tile_layout(*_shapes(layer), _attrs(layer), form) for layer in LAYERS}
        assert seen == expected, form


# masked flat frames both ways (lane_order 0 and 1): 8 images (whole items of 2 positions, the
# write-out's transposed case at one thread), 16 of 32 (a tile one position), waves of 10 of
# 20 (neither), 5 images of a 6x7 plane, a 1x7 row of 3, a 5x5 kernel, two channel blocks
LANE_LAYERS = [
    (8, 40, 24, 7, 7, 3, 3, (1, 1), (1, 1), (1, 1), 7, 7),
    (32, 20, 24, 5, 5, 3, 3, (1, 1), (1, 1), (1, 1), 5, 5),
    (20, 20, 24, 5, 5, 3, 3, (1, 1), (1, 1), (1, 1), 5, 5),
    (5, 40, 70, 6, 7, 3, 3, (1, 1), (1, 1), (1, 1), 6, 7),
    (3, 16, 33, 17, 17, 1, 7, (1, 1), (0, 3), (1, 1), 17, 17),
    (4, 20, 40, 13, 11, 5, 5, (1, 1), (2, 2), (1, 1), 13, 11),
    (8, 150, 36, 4, 4, 3, 3, (1, 1), (1, 1), (1, 1), 4, 4),
]


@pytest.mark.parametrize("level", RUNNABLE)
@pytest.mark.parametrize("layer", LANE_LAYERS, ids=lambda layer: "x".join(map(str, layer[:7])))
def test_interleaved_lanes_are_the_model(level, layer):
    """Where a level masks flat frames' lanes, both of their orders give the model's bits
    (a lane's steps do not depend on where it lies): fp32 and dot forms, 1-3 threads."""
    kernel = load_level(level)
    if not kernel.LANES:
        pytest.skip(f"{level} has no masked lanes (no flat frames with taps outside an image)")
    dy, w = _arrays(layer, seed=layer[0])
    expected = _model(layer, dy, w)
    for form in ["f32"] + (["dot"] if kernel.HAS_BF16_DOT else []):
        for lane_order, layout in ((0, "masked"), (1, "interleaved")):
            for threads in (1, 2, 3):
                layout_seen = kernel.tile_layout(*_shapes(layer), _attrs(layer), form, threads,
                                                 lane_order)  # fmt: skip
                assert layout_seen == layout
                _, out = _kernel_tile(kernel, layer, dy, w, threads, False, form == "dot",
                                      lane_order)  # fmt: skip
                np.testing.assert_array_equal(
                    out, expected, err_msg=f"{form} {layout}, {threads} threads"
                )


@pytest.mark.parametrize("level", RUNNABLE)
def test_interleaving_serves_where_it_computes_fewer_lanes(level):
    """The choice the speed hangs on: ResNet-50's 7x7 3x3 layer at batch 8 (a tile of 16
    positions of an image's rows mixes its border and inner ones: 24% more lanes than it
    needs, 11% interleaved) runs interleaved; its 56x56 one (a 2% gain, short of what the fill
    and write-out cost) and one image (nothing to interleave) do not."""
    kernel = load_level(level)
    if not kernel.LANES:
        pytest.skip(f"{level} has no masked lanes")
    attrs = (1, 1, 1, 1, 1, 1)
    for n, c, size, layout in ((8, 512, 7, "interleaved"), (8, 64, 56, "masked"),
                               (1, 512, 7, "masked")):  # fmt: skip
        shapes = ((n, c, size, size), (c, c, 3, 3), (n, c, size, size))
        assert kernel.tile_layout(*shapes, attrs, "f32", 2) == layout, (n, c, size)


def _shapes(layer):
    return ((layer[0], layer[2]) + layer[3:5], (layer[2], layer[1]) + layer[5:7],
            (layer[0], layer[1]) + layer[10:12])  # fmt: skip


# frames of about 0.8 and 1.5 MiB an image: a wave of one image on one thread, two on two
WAVE_LAYERS = [
    (3, 20, 200, 40, 40, 3, 3, (1, 1), (1, 1), (1, 1), 40, 40),
    (3, 16, 320, 48, 48, 1, 1, (2, 2), (0, 0), (1, 1), 95, 95),
]
_WAVE_MODEL = {}  # the model's result per layer, shared by the levels


@pytest.mark.parametrize("level", RUNNABLE)
@pytest.mark.parametrize("layer", WAVE_LAYERS, ids=lambda layer: "x".join(map(str, layer[:7])))
def test_tile_order_in_waves_of_images(level, layer):
    """Images whose frames outgrow a thread's cache share run in waves (frames filled, then
    the wave's items): the model's bits for 1, 2 and 3 waves (1, 2, 3 threads), every form."""
    from pypto._kernels.kernel import dgrad_baseline

    shapes = _shapes(layer)
    frames = dgrad_baseline.tile_buffer_bytes(*shapes, _attrs(layer), 1)
    assert frames < dgrad_baseline.tile_buffer_bytes(*shapes, _attrs(layer), 0)  # waves
    kernel = load_level(level)
    dy, w = _arrays(layer, seed=layer[2])
    if layer not in _WAVE_MODEL:
        _WAVE_MODEL[layer] = _model(layer, dy, w)
    expected = _WAVE_MODEL[layer]
    for use_dot in (False, True) if kernel.HAS_BF16_DOT else (False,):
        for threads in (1, 2, 3):
            path, out = _kernel_tile(kernel, layer, dy, w, threads, False, use_dot)
            np.testing.assert_array_equal(out, expected, err_msg=f"{path}, {threads} threads")


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: "x".join(map(str, layer[:7])))
def test_tile_unit_is_the_model(layer, tile_unit_allowed):
    kernel = load_level("avx512_amx")
    dy, w = _arrays(layer, seed=layer[2] + 1)
    expected = _model(layer, dy, w)
    for threads in (1, 2, 8):
        path, out = _kernel_tile(kernel, layer, dy, w, threads, use_amx=True)
        assert path == "tile+amx"
        np.testing.assert_array_equal(out, expected, err_msg=f"{threads} threads")


@pytest.fixture(scope="module")
def software_tile_unit(tmp_path_factory):
    """The avx512_amx level with its tile-unit instructions in software (support/amx_emulated:
    each as the SDM defines it), so that the unit's path runs where no CPU has the unit."""
    reason = amx_emulated.why_not()
    if reason:
        pytest.skip(f"no software tile unit here: {reason}")
    return amx_emulated.build(str(tmp_path_factory.mktemp("amx-emulated")))


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: "x".join(map(str, layer[:7])))
def test_tile_units_path_is_the_model_on_a_software_unit(layer, software_tile_unit):
    dy, w = _arrays(layer, seed=layer[2] + 1)
    expected = _model(layer, dy, w)
    for threads in (1, 3):
        path, out = _kernel_tile(software_tile_unit, layer, dy, w, threads, use_amx=True)
        assert path == "tile+amx"
        np.testing.assert_array_equal(out, expected, err_msg=f"{threads} threads")


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(layer=tile_order_layers(), threads=st.sampled_from([1, 2, 3, 5]),
       seed=st.integers(0, 2**32 - 1))  # fmt: skip
def test_random_layers_are_the_model_on_a_software_unit(layer, threads, seed, software_tile_unit):
    """The unit's path (its pack, frames and runs) on drawn layers, 1-5 threads"""
    dy, w = _arrays(layer, seed)
    path, out = _kernel_tile(software_tile_unit, layer, dy, w, threads, use_amx=True)
    assert path == "tile+amx"
    np.testing.assert_array_equal(out, _model(layer, dy, w), err_msg=f"{threads} threads")


@pytest.mark.parametrize("order", ["single", "c_first"])
def test_self_check_passes_a_true_software_unit_and_fails_wrong_ones(
    order, software_tile_unit, monkeypatch
):
    """The self-check's problems on the software unit: all pass in the SDM's order; a unit
    summing a block in one chain, or adding E and O to C one at a time, fails most of its
    order-sensitive problems (the other data rarely tell such orders apart)."""
    record = amx.run_self_check(software_tile_unit)
    assert record["passed"], record
    monkeypatch.setenv("PYPTO_AMX_EMULATED_ORDER", order)
    record = amx.run_self_check(software_tile_unit)
    assert record["passed"] is False
    failed = {p["problem"] for p in record["problems"] if not p["passed"]}
    sensitive = {p[0] for p in amx.SELF_CHECK_PROBLEMS if p[-1] == "order"}
    assert failed >= sensitive, record


def test_the_software_unit_is_the_sdm_model_the_hardware_matched(tmp_path):
    """tools/amx_order_probe.c built on the software unit: its SDM model (which the probe
    found the hardware equal to, its header says) equal in every row, on the bulk results and
    on the 16 edge cases (DAZ, FTZ, Inf, NaN, ties) that the kernel's tests never reach."""
    probe = TOOLS / "amx_order_probe.c"
    compiler = amx_emulated.compiler()
    if platform.machine().lower() not in ("x86_64", "amd64") or not probe.exists():
        pytest.skip("the probe is x86-64 code from the source tree (not in an sdist)")
    if shutil.which(compiler[0]) is None:
        pytest.skip(f"no C compiler ({compiler[0]})")
    exe = tmp_path / "probe"
    built = subprocess.run(
        compiler + ["-O2", "-ffp-contract=off", "-DPYPTO_AMX_EMULATED", str(probe), "-o",
                    str(exe), "-lm"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120).stdout
    check = _host_check()
    assert check.probe_verdict(out)[0], out
    # the verdict fails a unit off the model in one row, on the bulk or in one edge case
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.split()[:1] == ["4"])
    lines[row] = lines[row].rsplit(" ", 1)[0] + " 0.9998"
    assert not check.probe_verdict("\n".join(lines))[0]
    assert not check.probe_verdict(out.replace("sdm matches 1.000000", "sdm matches 0.999999"))[0]
    assert not check.probe_verdict(out.replace("16 of 16", "15 of 16"))[0]


def _host_check():
    """tools/amx_host_check.py (the source tree's; its readers of the probe and the bench)"""
    path = TOOLS / "amx_host_check.py"
    if not path.exists():
        pytest.skip("no tools/ beside these tests (a copy of the tests alone)")
    spec = importlib.util.spec_from_file_location("amx_host_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_amx_host_checks_targets_read_from_the_bench():
    """The AMX host's one-run check reads the bench's JSON as the targets say: whole passes
    (layer x count) against torch's faster path, and the cases' geometric mean."""
    check = _host_check()
    row = {"network": "n", "count": 2, "sum_order": "tile"}
    report = {"rows": [{**row, "pypto_ms": 1.0, "torch_best_ms": 3.0, "pypto_sequential_ms": 2.0},
                       {**row, "count": 1, "pypto_ms": 4.0, "torch_best_ms": 1.0,
                        "pypto_sequential_ms": 2.0}]}  # fmt: skip
    assert check.network_ratios(report) == {"n": (7.0 / 6.0, 6.0 / 6.0, "tile")}
    rows = [{"case": c, "peer": p, "ratio": r} for c, p, r in
            [("b", "pypto", 1.0), ("b", "torch best", 2.0), ("c", "torch best", 0.5),
             ("c", "torch bf16", 9.0)]]  # fmt: skip
    assert check.cases_geomean({"rows": rows}) == (1.0, {"b": 2.0, "c": 0.5})


def test_tile_order_differs_from_sequential_and_keeps_the_bound():
    """The two orders are different sums (so the model tests mean something), both within the
    fp32-accumulation bound of the float64 oracle."""
    prob = make_problem(2, 32, 256, 12, 12, 3, 3, pads=(1, 1))
    rng = np.random.default_rng(5)
    spread = np.exp2(rng.integers(-6, 7, (2, 256, 12, 12)))  # terms of unlike size round more
    dy = (rng.standard_normal((2, 256, 12, 12)) * spread).astype(ml_dtypes.bfloat16)
    w = (rng.standard_normal((256, 32, 3, 3)) * 0.05).astype(ml_dtypes.bfloat16)
    with pypto.options(sum_order="sequential"):
        sequential = run_op(prob, dy, w)
    tile = run_op(prob, dy, w)  # the default
    differ = np.count_nonzero(tile.view(np.uint16) != sequential.view(np.uint16))
    assert 0 < differ < tile.size // 100
    check_accuracy(tile, prob, dy, w, "tile order")
    expected = dgrad_tile_order(dy, w, (12, 12), (1, 1), (1, 1), (1, 1))
    np.testing.assert_array_equal(tile.view(np.uint16), expected.view(np.uint16))


@pytest.mark.parametrize("level", RUNNABLE)
def test_subnormals_and_specials_keep_ieee_bits(level):
    """Subnormal inputs and sums (where the tile unit would flush: it must not serve) and
    Inf/NaN in dy: the model's IEEE bits at every level, NaN where NaN."""
    layer = LAYERS[0]
    dy, w = _arrays(layer, seed=9)
    tiny = dy.astype(np.float32) * np.float32(2.0**-128)
    dy = tiny.astype(ml_dtypes.bfloat16)  # many subnormal in bf16
    dy[0, 3, 2, 2] = np.inf
    dy[1, 40, 0, 1] = -np.inf
    w[3, 0, 1, 1] = 0  # Inf x 0: NaN in channel 0
    assert (np.abs(dy.astype(np.float32)) < 2.0**-126).sum() > 100
    expected = _model(layer, dy, w)
    kernel = load_level(level)
    path, out = _kernel_tile(kernel, layer, dy, w, 2, use_amx=True)
    assert path == "tile+emulated"
    nan_out, nan_expected = (out & 0x7FFF) > 0x7F80, (expected & 0x7FFF) > 0x7F80
    np.testing.assert_array_equal(nan_out, nan_expected)
    np.testing.assert_array_equal(out[~nan_out], expected[~nan_expected])
    assert nan_out.any()
    assert np.isinf(out.view(ml_dtypes.bfloat16).astype(np.float32)).any()


@pytest.mark.parametrize("level", RUNNABLE)
def test_specials_without_subnormals_on_every_form(level):
    """Inf, NaN, -0 and near-overflow sums where nothing is subnormal, so every form serves
    (the bf16 dot product too): the model's bits, NaN where NaN."""
    layer = LAYERS[2]
    n, cin, cout, hout, wout, kh, kw = layer[:7]
    rng = np.random.default_rng(11)

    def near(shape, exponent):  # magnitudes in [1, 2) x 2^exponent, random signs
        signs = rng.choice([-1.0, 1.0], shape)
        return (signs * rng.uniform(1, 2, shape) * 2.0**exponent).astype(ml_dtypes.bfloat16)

    dy, w = near((n, cout, hout, wout), 60), near((cout, cin, kh, kw), 62)  # sums near 2^128
    dy[0, 3, 1, 2], dy[1, 40, 0, 1], dy[0, 7, 2, 2] = np.inf, -np.inf, np.nan
    dy[1, 5] = -0.0
    w[3, 0, 1, 1] = 0  # Inf x 0: NaN in channel 0
    expected = _model(layer, dy, w)
    kernel = load_level(level)
    for use_dot in (False, True):
        path, out = _kernel_tile(kernel, layer, dy, w, 2, False, use_dot)
        assert path == ("tile+dot" if use_dot and kernel.HAS_BF16_DOT else "tile+emulated")
        nan_out, nan_expected = (out & 0x7FFF) > 0x7F80, (expected & 0x7FFF) > 0x7F80
        np.testing.assert_array_equal(nan_out, nan_expected)
        np.testing.assert_array_equal(out[~nan_out], expected[~nan_expected])
        assert nan_out.any() and (np.abs(out.view(ml_dtypes.bfloat16)) == np.inf).sum() > 10


def test_option_scopes_environment_and_errors(monkeypatch):
    monkeypatch.delenv("PYPTO_SUM_ORDER", raising=False)
    assert pypto.get_options()["sum_order"] is None
    assert pypto.get_sum_order() == "tile"  # the bf16 default
    with pypto.options(sum_order="sequential"):
        assert pypto.get_sum_order("bf16") == "sequential"
        assert pypto.get_sum_order(pypto.DT_BF16) == "sequential"
        assert pypto.get_sum_order("fp16") == "sequential"  # fp16 sums sequentially
        with pypto.options(sum_order="tile"):
            assert pypto.get_sum_order() == "tile"
            assert pypto.get_sum_order("fp16") == "sequential"
        assert kernel_info()["bf16_sum_order"] == "sequential"
    assert pypto.get_sum_order() == "tile"
    monkeypatch.setenv("PYPTO_SUM_ORDER", "Sequential")
    assert pypto.get_sum_order() == "sequential"
    with pypto.options(sum_order="tile"):  # the option wins over the environment
        assert pypto.get_sum_order() == "tile"
    for bad in ("pairs", 3, ""):
        with pytest.raises(pypto.PyptoError, match="'sequential', 'tile'"):
            pypto.set_options(sum_order=bad)
    monkeypatch.setenv("PYPTO_SUM_ORDER", "fast")
    with pytest.raises(pypto.PyptoError, match="PYPTO_SUM_ORDER must be one of"):
        pypto.get_sum_order()


def test_environment_selects_the_order_for_calls(monkeypatch):
    layer = LAYERS[2]
    prob = make_problem(2, 33, 45, 4, 5, 3, 3, strides=(2, 2), pads=(1, 1), hin=8, win=9)
    dy, w = _arrays(layer, seed=3)
    monkeypatch.setenv("PYPTO_SUM_ORDER", "tile")
    np.testing.assert_array_equal(run_op(prob, dy, w).view(np.uint16), _model(layer, dy, w))
    fp16 = run_op(prob, dy.astype(np.float16), w.astype(np.float16))
    monkeypatch.setenv("PYPTO_SUM_ORDER", "sequential")
    assert np.array_equal(fp16, run_op(prob, dy.astype(np.float16), w.astype(np.float16)))


@pytest.fixture
def fresh_tile_unit_state(monkeypatch):
    monkeypatch.setattr(amx, "_state", None)
    yield
    amx._state = None


def test_refused_permission_falls_back_with_one_warning(monkeypatch, fresh_tile_unit_state):
    from pypto._kernels import features

    monkeypatch.setattr(features, "request_amx_permission", lambda: 1)  # EPERM
    monkeypatch.setattr(amx, "_run_child", lambda: pytest.fail("no self-check without permission"))

    class Kernel:  # the tile unit's level, as far as amx.py can tell
        HAS_AMX, ISA, __file__ = True, "avx512_amx", amx.__file__

    with pytest.warns(RuntimeWarning, match="runs emulated.*refused AMX tile data"):
        assert amx.tile_unit_usable(Kernel) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert amx.tile_unit_usable(Kernel) is False  # decided once, warned once
    assert "refused" in amx.tile_unit_state()[1]


def test_failed_self_check_falls_back(monkeypatch, tmp_path, fresh_tile_unit_state):
    from pypto._kernels import features

    monkeypatch.setenv("PYPTO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(features, "request_amx_permission", lambda: 0)
    record = {
        "passed": False,
        "problems": [{"problem": "p", "passed": False, "detail": "d"}],
        "summary": "0 of 1 problems bitwise equal to the emulation",
    }
    monkeypatch.setattr(amx, "_run_child", lambda: dict(record))

    class Kernel:
        HAS_AMX, ISA, __file__ = True, "avx512_amx", amx.__file__

    with pytest.warns(RuntimeWarning, match="self-check FAILED: 0 of 1"):
        assert amx.tile_unit_usable(Kernel) is False
    # the verdict is cached for this host and build: the next process runs no child
    amx._state = None
    monkeypatch.setattr(amx, "_run_child", lambda: pytest.fail("the cached verdict serves"))
    with pytest.warns(RuntimeWarning, match="cached in"):
        assert amx.tile_unit_usable(Kernel) is False
    # a cache file that is not a regular file is no verdict, never a hang
    (tmp_path / "amx-self-check.json").unlink()
    import os

    os.mkfifo(tmp_path / "amx-self-check.json")
    amx._state = None
    monkeypatch.setattr(amx, "_run_child", lambda: dict(record, summary="ran again"))
    with pytest.warns(RuntimeWarning, match="ran again"):
        assert amx.tile_unit_usable(Kernel) is False


def test_self_check_catches_a_wrong_tile_unit():
    """A tile unit off by one ulp in one element fails its problem (run here on the
    emulation standing in for it, so every CPU runs this)."""
    kernel = load_level(RUNNABLE[-1])

    class OffByOne:
        @staticmethod
        def dgrad_tile(dy, w, out, attrs, threads, use_amx, serial):
            kernel.dgrad_tile(dy, w, out, attrs, threads, False, serial)
            if use_amx:  # the first element that is not NaN, one ulp off
                out.reshape(-1)[np.flatnonzero((out & 0x7FFF) <= 0x7F80)[0]] ^= 1
                return "tile+amx"
            return "tile+emulated"

    record = amx.run_self_check(OffByOne)
    assert record["passed"] is False
    assert all(not p["passed"] and "1 of" in p["detail"] for p in record["problems"])


def test_self_check_passes_on_this_tile_unit(tile_unit_allowed, tmp_path, monkeypatch):
    """The real check, in its child process, on this host's tile unit; run from a folder
    holding another ``pypto`` (a source checkout beside the installed wheel), which the child
    must not import in place of the package that asked."""
    shadow = tmp_path / "pypto"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the shadowing pypto')\n")
    monkeypatch.chdir(tmp_path)
    record = amx._run_child()
    assert record["passed"], record
    assert len(record["problems"]) == len(amx.SELF_CHECK_PROBLEMS)


def _tile_call(layer, dy, w):
    n, cin, cout, hout, wout, kh, kw = layer[:7]
    (sh, sw), (pt, pl), (dh, dw) = layer[7:10]
    args = ([sh, sw], [pt, pt, pl, pl], [dh, dw])
    size = [n, cin, *layer[10:12]]
    tiles = pypto.suggest_convbp_input_tile_shapes(dy.shape, w.shape, size, pypto.DT_BF16, *args)
    with pypto.options(sum_order="tile", convbp_tile_shapes=tiles, vec_tile_shapes=[16] * 4):
        return (
            pypto.conv_backward_input(
                pypto.from_numpy(dy), size, pypto.from_numpy(w), pypto.DT_BF16, *args
            )
            .numpy()
            .view(np.uint16)
        )


def test_python_threads_and_a_forked_child_get_the_same_bits():
    """The tile unit's state is per thread (configured and released by each work item, on
    whatever thread runs it): Python threads calling at once, and a child forked after the
    parent used the unit (it inherits the OS's permission), all get the model's bits."""
    import concurrent.futures
    import multiprocessing

    layer = (2, 48, 96, 10, 12, 3, 3, (1, 1), (1, 1), (1, 1), 10, 12)
    dy, w = _arrays(layer, seed=11)
    expected = _model(layer, dy, w)
    with pypto.options(num_threads=2):
        np.testing.assert_array_equal(_tile_call(layer, dy, w), expected)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        for got in pool.map(lambda _: _tile_call(layer, dy, w), range(6)):
            np.testing.assert_array_equal(got, expected)
    context = multiprocessing.get_context("fork")
    with warnings.catch_warnings():  # fork with threads alive: Python's DeprecationWarning
        warnings.simplefilter("ignore", DeprecationWarning)
        with context.Pool(1) as pool:
            got = pool.apply(_tile_call, (layer, dy, w))
    np.testing.assert_array_equal(got, expected)


def _network_layers():
    """Every distinct layer shape of the bench's four networks (channels, kernel, stride,
    padding), at batch 1 and at most 10 input rows and columns (the order's sums are per
    output element: the image size changes how many, not how they are summed)."""
    from pypto.bench.networks import NETWORKS

    shapes = {}
    for net in NETWORKS.values():
        for layer in net.layers:
            sh, sw = (layer.stride,) * 2 if isinstance(layer.stride, int) else layer.stride
            ph, pw = (layer.pad,) * 2 if isinstance(layer.pad, int) else layer.pad
            key = (layer.cin, layer.cout, layer.kh, layer.kw, sh, sw, ph, pw)
            shapes.setdefault(key, f"{net.name}/{layer.name}")
    return sorted(shapes.items())


def test_tile_order_keeps_the_bound_on_every_network_layer():
    """The fp32-accumulation bound of the float64 oracle, on every distinct layer of the
    bench's networks, in the tile order (on the tile unit where this host has one)."""
    rng = np.random.default_rng(43)
    for (cin, cout, kh, kw, sh, sw, ph, pw), name in _network_layers():
        hin, win = min(10, 2 * kh + sh), min(10, 2 * kw + sw)
        hout, wout = (hin + 2 * ph - kh) // sh + 1, (win + 2 * pw - kw) // sw + 1
        prob = make_problem(1, cin, cout, hout, wout, kh, kw, (sh, sw), (ph, pw), hin=hin, win=win)
        dy = rng.standard_normal((1, cout, hout, wout)).astype(ml_dtypes.bfloat16)
        w = (rng.standard_normal((cout, cin, kh, kw)) / np.sqrt(cin * kh * kw)).astype(
            ml_dtypes.bfloat16
        )
        with pypto.options(sum_order="tile"):
            out = run_op(prob, dy, w)
        check_accuracy(out, prob, dy, w, name)


@pytest.mark.parametrize("threads", [1, 8, 16])
def test_tile_order_ignores_tiles_and_threads(threads):
    """Any legal tiles and any thread count: the same bits (the order is per output element;
    no K is ever split)."""
    prob = make_problem(2, 48, 80, 9, 16, 3, 3, pads=(1, 1))
    layer = (2, 48, 80, 9, 16, 3, 3, (1, 1), (1, 1), (1, 1), 9, 16)
    dy, w = _arrays(layer, seed=21)
    expected = _model(layer, dy, w)
    small = ((16, 144, 16), (16, 16, 16))  # the least legal tiles
    with pypto.options(sum_order="tile", num_threads=threads):
        for tiles in (None, small):
            np.testing.assert_array_equal(run_op(prob, dy, w, tiles).view(np.uint16), expected)


SMALL_SIGALTSTACK = r"""
import ctypes, warnings
import numpy as np, ml_dtypes, pypto
from pypto._kernels.dispatch import kernel_info
class Stack(ctypes.Structure):
    _fields_ = [("sp", ctypes.c_void_p), ("flags", ctypes.c_int), ("size", ctypes.c_size_t)]
space = ctypes.create_string_buffer(2048)
stack = Stack(ctypes.addressof(space), 0, 2048)
assert ctypes.CDLL(None).sigaltstack(ctypes.byref(stack), None) == 0
rng = np.random.default_rng(1)
dy = rng.standard_normal((1, 64, 6, 6)).astype(ml_dtypes.bfloat16)
w = rng.standard_normal((64, 16, 3, 3)).astype(ml_dtypes.bfloat16)
args = ([1, 1], [1, 1, 1, 1], [1, 1])
size = [1, 16, 6, 6]
tiles = pypto.suggest_convbp_input_tile_shapes(dy.shape, w.shape, size, pypto.DT_BF16, *args)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with pypto.options(sum_order="tile", convbp_tile_shapes=tiles, vec_tile_shapes=[16] * 4):
        out = pypto.conv_backward_input(pypto.from_numpy(dy), [1, 16, 6, 6], pypto.from_numpy(w),
                                        pypto.DT_BF16, *args).numpy()
print([str(c.message) for c in caught])
print(kernel_info()["tile_unit"])
np.save(__import__("sys").argv[1], out.view(np.uint16))
"""


def test_a_small_sigaltstack_gets_the_emulation_not_a_crash(tile_unit_allowed, tmp_path):
    """A process whose signal stack is too small for tile state (an old faulthandler, a
    runtime's own 2 KiB stack) is refused tile data by Linux: the call warns, runs emulated and
    gives the order's bits, instead of dying of SIGSEGV at its first tile instruction."""
    import subprocess
    import sys

    out = tmp_path / "out.npy"
    done = subprocess.run(
        [sys.executable, "-c", SMALL_SIGALTSTACK, str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # not the checkout's root, whose unbuilt pypto -c would import
    )
    assert done.returncode == 0, done.stderr
    assert "refused AMX tile data" in done.stdout and "emulated" in done.stdout
    layer = (1, 16, 64, 6, 6, 3, 3, (1, 1), (1, 1), (1, 1), 6, 6)
    rng = np.random.default_rng(1)
    dy = rng.standard_normal((1, 64, 6, 6)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((64, 16, 3, 3)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(np.load(out), _model(layer, dy, w))


def _against_a_guard_page(array):
    """A copy of ``array`` whose last byte ends a page, the next page unreadable: a kernel that
    reads one element past it faults (the gathers of the weight pack read 32 bits an element).
    Returns (copy, keep): keep holds the mapping."""
    import mmap

    page = mmap.PAGESIZE
    size = array.nbytes
    pages = (size + page - 1) // page + 1
    region = mmap.mmap(-1, pages * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    libc = ctypes.CDLL(None, use_errno=True)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    guard = base + (pages - 1) * page
    offset = (pages - 1) * page - size
    copy = np.frombuffer(region, dtype=array.dtype, count=array.size, offset=offset)
    copy = copy.reshape(array.shape)
    copy[...] = array
    assert libc.mprotect(ctypes.c_void_p(guard), ctypes.c_size_t(page), 0) == 0
    return copy, (region, libc, guard, page)


@pytest.mark.parametrize("level", RUNNABLE)
def test_the_weight_pack_reads_nothing_past_the_weight(level, request):
    """The weight's last element ends a page, the next one unreadable: every form packs it
    (the tile unit's where this host has one) and gets the model's bits."""
    layer = (1, 33, 47, 4, 5, 3, 3, (1, 1), (1, 1), (1, 1), 4, 5)  # short blocks, one last row
    kernel = load_level(level)
    dy, w = _arrays(layer, seed=9)
    expected = _model(layer, dy, w)
    guarded, keep = _against_a_guard_page(w.view(np.uint16))
    try:
        forms = [(False, False), (False, True)] if kernel.HAS_BF16_DOT else [(False, False)]
        if getattr(kernel, "HAS_AMX", False):
            request.getfixturevalue("tile_unit_allowed")
            forms.append((True, False))
        for use_amx, use_dot in forms:
            path, out = _kernel_tile(
                kernel, layer, dy, guarded.view(ml_dtypes.bfloat16), 1, use_amx, use_dot
            )
            np.testing.assert_array_equal(out, expected, err_msg=path)
    finally:
        region, libc, guard, page = keep
        libc.mprotect(ctypes.c_void_p(guard), ctypes.c_size_t(page), 3)
        del guarded
