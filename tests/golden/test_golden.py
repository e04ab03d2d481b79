"""Golden cases and accuracy verdicts: pypto.testing, `pypto golden`, `pypto compare`.

Faults are injected into pypto's own result (a zeroed M tile, a tile shifted by one row, ulp
noise, a NaN, files of the wrong dtype or size); each verdict and each localisation must be the
right one, and a clean result must pass. The golden itself is checked against the independent
float64 oracle of tests/support/reference.py.
"""

import json
import pathlib
import shutil
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import pypto
import pypto.testing as T
from pypto import __main__ as cli
from pypto._golden.case import draw_inputs, golden_dgrad, make_case, pypto_dgrad
from pypto._golden.localise import task_grid
from support.reference import dgrad_abs_reference, dgrad_brute_force, dgrad_reference
from support.slowdown import limit

HERE = pathlib.Path(__file__).resolve().parent
BF16 = np.dtype(ml_dtypes.bfloat16)

# 2 images, Cin 40 (channel blocks 0-15, 16-31 and a partial 32-39), Hin 12 in M tiles of 3 rows
PROBLEM = dict(
    grad_output=[2, 32, 12, 12],
    weight=[32, 40, 3, 3],
    input_size=[2, 40, 12, 12],
    strides=[1, 1],
    paddings=[1, 1, 1, 1],
    dilations=[1, 1],
)
TILES = ((36, 288, 16), (32, 144, 16))
# Hin 13: the last M tile holds one row
TAIL = dict(
    grad_output=[1, 32, 13, 13],
    weight=[32, 40, 3, 3],
    input_size=[1, 40, 13, 13],
    strides=[1, 1],
    paddings=[1, 1, 1, 1],
    dilations=[1, 1],
)
TAIL_TILES = ((39, 288, 16), (48, 144, 16))


def _case(problem, tiles, dtype, dist="uniform", seed=0):
    case = make_case(
        problem["grad_output"],
        problem["weight"],
        problem["input_size"],
        dtype,
        problem["strides"],
        problem["paddings"],
        problem["dilations"],
        tiles,
    )
    dy, w = draw_inputs(case, dist, seed)
    return case, dy, w, pypto_dgrad(case, dy, w)


@pytest.fixture(scope="module", params=["fp16", "bf16"])
def clean(request):
    return _case(PROBLEM, TILES, request.param)


def _compare(actual, dy, w, problem=PROBLEM, tiles=TILES, **kw):
    return T.compare(
        actual,
        dy,
        w,
        problem["input_size"],
        problem["strides"],
        problem["paddings"],
        problem["dilations"],
        tiles=tiles,
        **kw,
    )


def _verdicts(result):
    return {sid: v.passed for sid, v in result.verdicts.items()}


# --- the golden ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(
    "dy_shape, w_shape, strides, paddings, dilations, hin_extra",
    [
        ([1, 16, 5, 7], [16, 24, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 0),
        ([2, 16, 4, 5], [16, 16, 3, 2], [2, 3], [1, 1, 0, 0], [1, 1], 1),  # strides, the max size
        ([1, 32, 6, 6], [32, 8, 3, 3], [1, 1], [2, 2, 2, 2], [2, 2], 0),  # dilation
        ([1, 16, 3, 4], [16, 16, 1, 1], [2, 2], [0, 0, 0, 0], [1, 1], 1),  # 1x1, strided
    ],
)
def test_golden_matches_the_independent_oracle(
    dtype, dy_shape, w_shape, strides, paddings, dilations, hin_extra
):
    (hin, _), (win, _) = pypto.conv_backward_input_size_range(
        dy_shape, w_shape, strides, paddings, dilations
    )
    size = [dy_shape[0], w_shape[1], hin + hin_extra, win + hin_extra]
    case = make_case(dy_shape, w_shape, size, dtype, strides, paddings, dilations)
    dy, w = draw_inputs(case, "normal", 3)
    golden = golden_dgrad(case, dy, w)
    geometry = (size[2:], strides, (paddings[0], paddings[2]), dilations)
    oracle = dgrad_reference(dy, w, *geometry)
    magnitude = dgrad_abs_reference(dy, w, *geometry)
    # both are float64 sums of exact products: they differ by float64 roundings only
    assert golden.dtype == np.float64 and golden.shape == tuple(size)
    assert np.all(np.abs(golden - oracle) <= 1e-13 * (magnitude + 1e-300))
    np.testing.assert_allclose(golden, dgrad_brute_force(dy, w, *geometry), rtol=0, atol=1e-12)
    # and compare() judges against that golden
    result = T.compare(pypto_dgrad(case, dy, w), dy, w, size, strides, paddings, dilations)
    assert np.array_equal(result.golden, golden)


# --- clean results pass -------------------------------------------------------------------------
def test_a_clean_result_passes_every_standard(clean):
    case, dy, w, ref = clean
    result = _compare(ref, dy, w, standard="all")
    assert result.passed and all(_verdicts(result).values()), result.report()
    assert result.localisation.outside_count == 0 and not result.localisation.failing_tasks()
    ratios = result.verdicts["dual-L2"].numbers
    assert ratios["mare_ratio"] == ratios["mere_ratio"] == ratios["rmse_ratio"] == 1.0
    assert result.metrics.nonfinite_mismatch == 0
    # each verdict names its standard, version and thresholds
    v = result.verdicts["single-2026-04"]
    assert (v.name, v.version) == ("single-benchmark (community)", "2026-04")
    assert v.thresholds["mere_below"] == (2.0**-10 if case.dtype_name == "fp16" else 2.0**-7)
    assert result.verdicts["single-2026-07"].thresholds["max_abs"] == (
        0.1 if case.dtype_name == "fp16" else 1.0
    )
    assert result.verdicts["dual-L0"].thresholds["mare_ratio"] == 10
    # the histogram: most elements are the correctly rounded value, none far from it
    hist = result.metrics.ulp_histogram
    assert hist["0"] > 0.99 * ref.size and hist[">256"] == hist["17-256"] == 0
    if case.dtype_name == "bf16":  # 2^-8 rounding steps: the 0.001 form is only a warning
        assert result.verdicts["msprobe"].warning is not None


@pytest.mark.parametrize("dist", ["normal", "ints"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_clean_results_of_other_data_are_within_the_bound(dtype, dist):
    case, dy, w, ref = _case(PROBLEM, TILES, dtype, dist, seed=1)
    result = _compare(ref, dy, w)
    verdicts = _verdicts(result)
    assert all(
        verdicts[s] for s in ("single-2026-07", "dual-L0", "dual-L1", "dual-L2", "msprobe")
    ), result.report()
    assert result.localisation.outside_count == 0


def test_single_2026_04_fails_a_correct_result_near_cancellation():
    """CANN's 2026-04 MARE divides by |g| + 1e-7: a golden near zero (fp32 accumulation error
    of a few 1e-6) fails a correct fp16 result, as it would fail a correct NPU. Pinned so the
    thresholds stay CANN's, not ours."""
    case, dy, w, ref = _case(PROBLEM, TILES, "fp16", "normal", seed=0)
    result = _compare(ref, dy, w)
    assert not result.verdicts["single-2026-04"].passed
    assert result.metrics.mare > 10 * 2.0**-10 and result.metrics.mere < 2.0**-10
    assert [s for s, ok in _verdicts(result).items() if not ok] == ["single-2026-04"]
    assert result.localisation.outside_count == 0  # and the element is within the fp32 bound


# --- injected faults ---------------------------------------------------------------------------
def _outside_rows(section):
    return [row[0] for row in section if row[2] > 0]


def test_a_zeroed_m_tile_is_located_to_exactly_that_task(clean):
    case, dy, w, ref = clean
    bad = ref.copy()
    bad[1, 16:32, 3:6, :] = 0  # image 1, channel block 1, M tile 1 (rows 3-5)
    result = _compare(bad, dy, w, standard="all")
    assert not any(_verdicts(result).values()), result.report()
    loc = result.localisation
    assert [t[:3] for t in loc.failing_tasks()] == [(1, 1, 1)]
    assert _outside_rows(loc.per_image()) == ["image 1"]
    assert _outside_rows(loc.per_channel_block()) == ["channels 16-31"]
    assert _outside_rows(loc.per_m_tile()) == ["M tile 1 (rows 3-5)"]
    # every element of the box is wrong (|g| is never tiny here), none outside it
    assert loc.outside_count == 16 * 3 * 12 == loc.failing_tasks()[0][3]
    for e in loc.worst(5):
        assert (e.n, e.block, e.tile) == (1, 1, 1) and e.actual == 0 and e.over_bound > 1
        assert 16 <= e.c < 32 and 3 <= e.h < 6
        assert (
            e.pypto == float(ref[e.n, e.c, e.h, e.w])
            and e.golden == result.golden[e.n, e.c, e.h, e.w]
        )
    text = result.report()
    assert "tasks with elements outside the bound: 1 of 24" in text
    assert "image 1, channels 16-31, M tile 1 (rows 3-5): 576 of 576 outside" in text


def test_a_zeroed_tail_tile_of_the_partial_channel_block():
    case, dy, w, ref = _case(TAIL, TAIL_TILES, "fp16")
    assert task_grid(case.problem, case.tiling) == (3, 16, 5, 3)
    bad = ref.copy()
    bad[0, 32:40, 12, :] = 0  # the one-row tail tile of the 8-channel block
    result = _compare(bad, dy, w, TAIL, TAIL_TILES)
    assert not result.passed
    loc = result.localisation
    assert [t[:3] for t in loc.failing_tasks()] == [(0, 2, 4)]
    assert loc.block_name(2) == "channels 32-39" and loc.tile_name(4) == "M tile 4 (row 12)"
    assert loc.outside_count == 8 * 13


def test_a_tile_shifted_by_one_row_is_located(clean):
    case, dy, w, ref = clean
    bad = ref.copy()
    bad[0, 32:40, 6:9, :] = ref[0, 32:40, 5:8, :]  # M tile 2 of block 2 read one row too high
    result = _compare(bad, dy, w)
    assert not result.passed
    loc = result.localisation
    assert [t[:3] for t in loc.failing_tasks()] == [(0, 2, 2)]
    assert _outside_rows(loc.per_m_tile()) == ["M tile 2 (rows 6-8)"]
    assert loc.outside_count > 0.95 * 8 * 3 * 12
    assert not result.verdicts["single-2026-07"].passed  # 96% within its tolerance < 99%


def test_one_ulp_noise_everywhere_fails_only_the_dual_standard_for_fp16():
    case, dy, w, ref = _case(PROBLEM, TILES, "fp16")
    rng = np.random.default_rng(5)
    bits = ref.view(np.uint16).astype(np.int32) + rng.choice([-1, 1], size=ref.shape)
    noisy = bits.astype(np.uint16).view(ref.dtype)  # one representable value up or down
    result = _compare(noisy, dy, w)
    assert _verdicts(result) == {
        "single-2026-04": True,
        "single-2026-07": True,
        "dual-L0": False,
        "dual-L1": False,
        "dual-L2": False,
        "msprobe": True,
    }
    assert result.verdicts["dual-L0"].numbers["mere_ratio"] > 2
    assert result.metrics.ulp_histogram["1"] + result.metrics.ulp_histogram["2"] > 0.9 * ref.size
    # not one box: every task has elements outside the bound
    loc = result.localisation
    assert len(loc.failing_tasks()) == loc.task_outside.size == 24


def test_bf16_ulp_noise():
    case, dy, w, ref = _case(PROBLEM, TILES, "bf16")
    rng = np.random.default_rng(5)
    bits = ref.view(np.uint16).astype(np.int32) + rng.choice([-2, 2], size=ref.shape)
    result = _compare(bits.astype(np.uint16).view(BF16), dy, w)
    verdicts = _verdicts(result)
    assert verdicts["single-2026-07"] and not verdicts["single-2026-04"]
    assert not verdicts["dual-L0"] and not verdicts["msprobe"]
    assert len(result.localisation.failing_tasks()) == 24


def test_a_nan_fails_every_standard_and_is_located(clean):
    case, dy, w, ref = clean
    bad = ref.copy()
    bad[1, 37, 10, 4] = np.nan
    result = _compare(bad, dy, w)
    assert not any(_verdicts(result).values())
    assert result.metrics.nonfinite_mismatch == 1
    for v in result.verdicts.values():
        assert v.numbers["nonfinite_mismatch"] == 1 and "NaN/Inf mismatch" in v.detail
    # the other metrics cover the finite elements: they are pypto's
    assert result.metrics.mere == pytest.approx(result.reference_metrics.mere, rel=1e-3)
    loc = result.localisation
    assert loc.outside_count == 1 and [t[:4] for t in loc.failing_tasks()] == [(1, 2, 3, 1)]
    worst = loc.worst(1)[0]
    assert (worst.n, worst.c, worst.h, worst.w) == (1, 37, 10, 4) and np.isnan(worst.actual)


def test_matching_infs_count_as_equal_and_a_wrong_sign_fails():
    case = make_case([1, 16, 6, 6], [16, 16, 3, 3], None, "fp16", [1, 1], [1, 1, 1, 1], [1, 1])
    dy, w = draw_inputs(case, "uniform", 0)
    w[3, 5, 1, 1] = np.inf
    w[2, 7, 0, 0] = -np.inf
    ref = pypto_dgrad(case, dy, w)
    size = list(case.input_size)
    result = T.compare(ref, dy, w, size, [1, 1], [1, 1, 1, 1], [1, 1], standard="all")
    assert result.passed and result.metrics.nonfinite_equal > 0, result.report()
    bad = ref.copy()
    where = np.argwhere(np.isinf(ref))[0]
    bad[tuple(where)] = -bad[tuple(where)]
    failed = T.compare(bad, dy, w, size, [1, 1], [1, 1, 1, 1], [1, 1])
    assert not failed.passed and failed.metrics.nonfinite_mismatch == 1


def test_assert_dgrad_close(clean):
    case, dy, w, ref = clean
    args = (dy, w, PROBLEM["input_size"], [1, 1], [1, 1, 1, 1], [1, 1])
    assert T.assert_dgrad_close(ref, *args, tiles=TILES).passed
    bad = ref.copy()
    bad[0, 0:16, 9:12, :] *= 2
    with pytest.raises(AssertionError) as info:
        T.assert_dgrad_close(bad, *args, tiles=TILES, standard="single-2026-07")
    text = str(info.value)
    assert "fails the single-2026-07 standard" in text
    assert "FAIL           single-2026-07" in text
    assert "image 0, channels 0-15, M tile 3 (rows 9-11)" in text


def test_pypto_tensors_and_uint16_bf16_bits_are_accepted():
    case, dy, w, ref = _case(PROBLEM, TILES, "bf16")
    result = T.compare(
        pypto.from_numpy(ref.view(np.uint16)),
        pypto.from_numpy(dy),
        pypto.from_numpy(w),
        PROBLEM["input_size"],
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        dtype="bf16",
        tiles=TILES,
    )
    assert result.passed


# --- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "change, text",
    [
        (dict(actual=np.zeros((2, 40, 12, 12), np.float32)), "actual holds float32 data"),
        (dict(actual=np.zeros((2, 40, 12, 11), np.float16)), "actual has shape [2, 40, 12, 11]"),
        (dict(actual=[1, 2]), "actual must be a NumPy array"),
        (dict(grad_output=np.zeros((2, 32, 12, 12), np.float32)), "cannot tell fp16 from bf16"),
        (dict(standard="dual-L3"), "standard must be one of single-2026-04"),
        (dict(tiles=((36, 288), (32, 144, 16))), "tiles[0] (L1) must be a ConvBpTileL1Info"),
        (dict(tiles=((36, 280, 16), (32, 144, 16))), "Invalid tileKL1:280"),
        (dict(input_size=[2, 40, 20, 12]), "input_size[2] must be in [12, 12]"),
        (dict(dtype="fp32"), "dtype must be 'fp16', 'bf16'"),
        (dict(golden=np.zeros((2, 40, 12, 12), np.int32)), "golden must be a float array"),
    ],
)
def test_bad_arguments_are_pypto_errors(change, text):
    case, dy, w, ref = _case(PROBLEM, TILES, "fp16")
    kw = dict(
        actual=ref,
        grad_output=dy,
        weight=w,
        input_size=PROBLEM["input_size"],
        strides=[1, 1],
        paddings=[1, 1, 1, 1],
        dilations=[1, 1],
        tiles=TILES,
    )
    kw.update(change)
    with pytest.raises(pypto.PyptoError) as info:
        T.compare(**kw)
    assert text in str(info.value)


def test_the_comparison_is_memory_guarded():
    case, dy, w, ref = _case(PROBLEM, TILES, "fp16")
    with pypto.options(memory_limit=100_000):
        with pytest.raises(pypto.error.PyptoMemoryError, match="the float64 golden"):
            _compare(ref, dy, w)


def test_the_m_tiles_and_channel_blocks_are_the_npu_plans():
    from pypto._core.rules import problem_from_shapes
    from pypto._core.tiling import Tiling

    for dy, wt, size, tiling, expected in [
        (
            [2, 32, 12, 12],
            [32, 40, 3, 3],
            [2, 40, 12, 12],
            Tiling(36, 288, 16, 32, 144, 16),
            (3, 16, 4, 3),
        ),
        (
            [1, 16, 5, 32],
            [16, 16, 3, 3],
            [1, 16, 5, 32],
            Tiling(16, 144, 16, 16, 16, 16),
            (1, 16, 5, 1),
        ),  # tileML1 < Win: one row per tile
        (
            [1, 16, 7, 40],
            [16, 24, 3, 3],
            [1, 24, 7, 40],
            Tiling(80, 144, 64, 64, 144, 32),
            (2, 32, 4, 1),
        ),  # tileNL1 above Cin rounded up to 16
        (
            [1, 16, 70000, 4],
            [16, 16, 1, 1],
            [1, 16, 70000, 4],
            Tiling(4, 16, 16, 16, 16, 16),
            (2, 16, 35000, 1),
        ),
    ]:  # more than 65535 tasks
        pads = [0, 0, 0, 0] if wt[2] == 1 else [1, 1, 1, 1]
        p = problem_from_shapes(dy, wt, size, pypto.DT_FP16, [1, 1], pads, [1, 1])
        assert task_grid(p, tiling) == expected


# --- the command line ----------------------------------------------------------------------------
def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "pypto", *args],
        capture_output=True,
        text=True,
        timeout=limit(300),
        cwd=HERE,
    )


def _main(capsys, *args):
    """pypto's CLI in this process: (exit code, stdout, stderr)."""
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


GOLDEN_ARGS = [
    "--grad-output",
    "2,32,12,12",
    "--weight",
    "32,40,3,3",
    "--paddings",
    "1,1,1,1",
    "--l1",
    "36,288,16",
    "--l0",
    "32,144,16",
]


@pytest.fixture(scope="module")
def case_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("golden") / "case"
    done = _cli("golden", *GOLDEN_ARGS, "--seed", "7", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "pypto compare" in done.stdout and "23040 bytes" in done.stdout
    return out


def test_golden_writes_the_layout_and_the_manifest(case_dir):
    manifest = json.loads((case_dir / "manifest.json").read_text())
    assert manifest["format"] == "pypto-golden/1" and manifest["pypto_version"] == pypto.__version__
    assert manifest["sum_order"] == "sequential"  # fp16's only order
    assert manifest["dtype"] == "fp16" and manifest["seed"] == 7 and manifest["dist"] == "uniform"
    assert manifest["input_size"] == [2, 40, 12, 12] and manifest["paddings"] == [1, 1, 1, 1]
    assert manifest["tiles"]["l1"] == [36, 288, 16] and manifest["tiles"]["l0"] == [32, 144, 16]
    for name, (dtype, shape) in {
        "grad_output": ("<f2", [2, 32, 12, 12]),
        "weight": ("<f2", [32, 40, 3, 3]),
        "golden": ("<f8", [2, 40, 12, 12]),
        "pypto": ("<f2", [2, 40, 12, 12]),
    }.items():
        entry = manifest["files"][name]
        raw = np.fromfile(case_dir / entry["bin"], dtype).reshape(shape)
        assert (
            entry["shape"] == shape and (case_dir / entry["bin"]).stat().st_size == entry["bytes"]
        )
        assert np.array_equal(raw, np.load(case_dir / entry["npy"]))
    dy = np.fromfile(case_dir / "input/grad_output.bin", "<f2").reshape(2, 32, 12, 12)
    w = np.fromfile(case_dir / "input/weight.bin", "<f2").reshape(32, 40, 3, 3)
    golden = np.fromfile(case_dir / "output/golden.bin", "<f8").reshape(2, 40, 12, 12)
    assert np.all(
        np.abs(golden - dgrad_reference(dy, w, (12, 12), (1, 1), (1, 1), (1, 1)))
        <= 1e-13 * dgrad_abs_reference(dy, w, (12, 12), (1, 1), (1, 1), (1, 1))
    )


def test_compare_round_trip_exit_codes(case_dir, tmp_path):
    ref = np.fromfile(case_dir / "output/pypto.bin", "<f2").reshape(2, 40, 12, 12)
    ref.tofile(case_dir / "output/output.bin")
    ok = _cli("compare", str(case_dir), "--actual", "output.bin", "--standard", "all")
    assert ok.returncode == 0, ok.stderr + ok.stdout
    lines = ok.stdout.splitlines()
    assert sum(line.startswith("PASS") for line in lines) == 6
    assert "verdict (every standard): PASS" in ok.stdout
    assert "every one of the 24 tasks is within the bound" in ok.stdout
    bad = ref.copy()
    bad[0, 16:32, 9:12, :] = 0
    np.save(tmp_path / "output.npy", bad)
    failed = _cli("compare", str(case_dir), "--actual", str(tmp_path / "output.npy"), "--top", "3")
    assert failed.returncode == 1, failed.stderr
    assert "FAIL           dual-L0" in failed.stdout and "verdict (dual-L0): FAIL" in failed.stdout
    assert "image 0, channels 16-31, M tile 3 (rows 9-11): 576 of 576 outside" in failed.stdout
    worst = failed.stdout.split("worst elements")[1].strip().splitlines()[2:]
    assert len(worst) == 3 and all(line.endswith("block 1, M tile 3") for line in worst)


def test_compare_writes_the_json_report(case_dir, tmp_path):
    ref = np.fromfile(case_dir / "output/pypto.bin", "<f2").reshape(2, 40, 12, 12)
    bad = ref.copy()
    bad[0, 16:32, 9:12, :] = 0
    np.save(tmp_path / "output.npy", bad)
    report_path = tmp_path / "report.json"
    done = _cli(
        "compare",
        str(case_dir),
        "--actual",
        str(tmp_path / "output.npy"),
        "--top",
        "4",
        "--json",
        str(report_path),
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.rstrip().endswith(f"JSON report: {report_path}")
    report = json.loads(report_path.read_text())
    assert report["standard"] == "dual-L0" and report["passed"] is False
    verdicts = report["verdicts"]
    assert len(verdicts) == 6 and all(v["source"] for v in verdicts.values())
    assert not verdicts["dual-L0"]["passed"] and not verdicts["single-2026-04"]["passed"]
    assert "cross-checked" in verdicts["dual-L0"]["source"]
    assert verdicts["dual-L0"]["thresholds"]["mare_ratio"] == 10
    where = report["localisation"]
    assert where["grid"]["m_tiles"] == 4 and where["grid"]["channel_blocks"] == 3
    assert [
        (t["image"], t["channel_block"], t["m_tile"], t["outside"]) for t in where["failing_tasks"]
    ] == [(0, 1, 3, 576)]
    assert len(where["worst"]) == 4
    assert all(e["actual"] == 0 and e["golden"] != 0 for e in where["worst"])
    assert report["case"]["grad_output"] == [2, 32, 12, 12] and report["case"]["dtype"] == "fp16"
    assert report["case"]["weight"] == [32, 40, 3, 3] and report["case"]["tiles"]["l1"] == [
        36,
        288,
        16,
    ]
    code = _cli(
        "compare",
        str(case_dir),
        "--actual",
        str(tmp_path / "output.npy"),
        "--json",
        str(tmp_path / "no" / "report.json"),
    )
    assert code.returncode == 2 and "cannot write the JSON report" in code.stderr


def test_compare_plots_from_the_command_line(case_dir, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    ref = np.fromfile(case_dir / "output/pypto.bin", "<f2").reshape(2, 40, 12, 12)
    bad = ref.copy()
    bad[1, 32:40, 0:3, :] = 0
    np.save(tmp_path / "bad.npy", bad)
    png = tmp_path / "dx.png"
    code, out, err = _main(
        capsys,
        "compare",
        str(case_dir),
        "--actual",
        str(tmp_path / "bad.npy"),
        "--plot",
        str(png),
        "--plot-units",
        "bound",
        "--top",
        "0",
    )
    assert code == 1, err
    assert out.rstrip().endswith(f"plot: {png}") and "worst elements" not in out
    assert "image 1, channels 32-39, M tile 0 (rows 0-2)" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    code, _, err = _main(
        capsys,
        "compare",
        str(case_dir),
        "--actual",
        str(tmp_path / "bad.npy"),
        "--plot",
        str(tmp_path / "no" / "dir.png"),
    )
    assert code == 2 and "cannot write the plot to" in err


def test_bf16_round_trip_with_options_before_the_command(tmp_path):
    out = tmp_path / "bf16"
    made = _cli("--dtype", "bf16", "golden", *GOLDEN_ARGS, "--dist", "normal", "--out", str(out))
    assert made.returncode == 0, made.stderr
    assert json.loads((out / "manifest.json").read_text())["dtype"] == "bf16"
    bits = np.load(out / "output/pypto.npy")
    assert bits.dtype == np.uint16
    shutil.copy(out / "output/pypto.bin", out / "output/output.bin")
    done = _cli("compare", str(out), "--threads", "1")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "bf16" in done.stdout and "verdict (dual-L0): PASS" in done.stdout


@pytest.mark.parametrize(
    "fault, text",
    [
        (
            "truncated",
            "has 23038 bytes, expected 23040 (fp16 [2, 40, 12, 12] = 11520 elements x 2 "
            "bytes) (truncated?)",
        ),
        (
            "float32 bin",
            "has 46080 bytes, expected 23040 (fp16 [2, 40, 12, 12] = 11520 elements x 2 "
            "bytes) (the size of float32 data of that shape",
        ),
        ("float32 npy", "holds float32 data; expected float16 (fp16)"),
        ("wrong shape npy", "has shape [2, 40, 144], expected [2, 40, 12, 12]"),
        ("missing", "cannot read"),
    ],
)
def test_bad_result_files_are_usage_errors(case_dir, tmp_path, capsys, fault, text):
    ref = np.fromfile(case_dir / "output/pypto.bin", "<f2").reshape(2, 40, 12, 12)
    path = tmp_path / ("output.npy" if "npy" in fault else "output.bin")
    if fault == "truncated":
        ref.tofile(path)
        path.write_bytes(path.read_bytes()[:-2])
    elif fault == "float32 bin":
        ref.astype(np.float32).tofile(path)
    elif fault == "float32 npy":
        np.save(path, ref.astype(np.float32))
    elif fault == "wrong shape npy":
        np.save(path, ref.reshape(2, 40, 144))
    code, out, err = _main(capsys, "compare", str(case_dir), "--actual", str(path))
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert text in err, err


@pytest.mark.parametrize(
    "args, text",
    [
        (["compare", "{dir}", "--dtype", "bf16"], "--dtype bf16, but the case in"),
        (["compare", "{tmp}"], "manifest.json not found"),
        (["compare", "{dir}", "--top", "-1"], "--top: expected an int >= 0"),
        (["compare", "{dir}", "--standard", "nope"], "invalid choice: 'nope'"),
        (
            [
                "golden",
                "--grad-output",
                "2,32,12,12",
                "--weight",
                "32,40,3,3",
                "--out",
                "{tmp}",
                "--dist",
                "cauchy",
            ],
            "invalid choice: 'cauchy'",
        ),
        (
            [
                "golden",
                *GOLDEN_ARGS[:6],
                "--l1",
                "36,280,16",
                "--l0",
                "32,144,16",
                "--out",
                "{tmp}",
            ],
            "Invalid tileKL1:280",
        ),
        (
            [
                "golden",
                "--grad-output",
                "64,1024,1000,1000",
                "--weight",
                "1024,1024,3,3",
                "--paddings",
                "1,1,1,1",
                "--out",
                "{tmp}",
            ],
            "MemoryError",
        ),
        (["golden", *GOLDEN_ARGS, "--out", "{file}"], "cannot write the case to"),
    ],
)
def test_cli_usage_errors_exit_2(case_dir, tmp_path, capsys, args, text):
    (tmp_path / "a_file").write_text("x")
    args = [a.format(dir=case_dir, tmp=tmp_path, file=tmp_path / "a_file") for a in args]
    code, out, err = _main(capsys, *args)
    assert code == 2 and "Traceback" not in err
    assert text in err, err


def test_compare_into_a_closed_pipe_ends_quietly(case_dir):
    reader = subprocess.Popen(
        [sys.executable, "-m", "pypto", "compare", str(case_dir), "--actual", "pypto.bin"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=HERE,
    )
    reader.stdout.close()
    _, err = reader.communicate(timeout=limit(120))
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err
    assert reader.returncode in (0, 1)


def test_a_bad_manifest_is_a_usage_error(case_dir, tmp_path, capsys):
    broken = tmp_path / "case"
    shutil.copytree(case_dir, broken)
    manifest = json.loads((broken / "manifest.json").read_text())
    manifest["strides"] = [1, "x"]
    (broken / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = _main(capsys, "compare", str(broken))
    assert code == 2 and "'strides' must be a list of 2 ints" in err
    (broken / "manifest.json").write_text("{not json")
    code, _, err = _main(capsys, "compare", str(broken))
    assert code == 2 and "cannot read" in err and "manifest.json" in err


def test_a_result_owns_what_it_judged(clean):
    """Issue 42 #1: the result keeps copies of actual, golden and reference; the caller's
    arrays changing afterwards (a gradient the next backward adds into) leave it as judged."""
    case, dy, w, ref = clean
    actual = ref.copy()
    golden = _compare(ref, dy, w).golden.copy()
    given_ref = ref.copy()
    result = _compare(actual, dy, w, golden=golden, reference=given_ref)
    given = (actual, golden, given_ref)
    for mine, kept in zip(given, (result.actual, result.golden, result.reference)):
        assert not np.shares_memory(mine, kept)
    judged = (result.actual.copy(), result.golden.copy(), result.reference.copy())
    actual += actual
    golden *= 3
    given_ref -= given_ref
    for before, kept in zip(judged, (result.actual, result.golden, result.reference)):
        assert np.array_equal(before.view(np.uint8), kept.view(np.uint8))


# --- the picture ---------------------------------------------------------------------------------
def test_plot_draws_the_faulty_tile(clean, tmp_path):
    pytest.importorskip("matplotlib")
    case, dy, w, ref = clean
    bad = ref.copy()
    bad[1, 16:32, 3:6, :] = ref[1, 16:32, 2:5, :]
    result = _compare(bad, dy, w)
    for units in ("ulp", "relative", "bound"):
        path = tmp_path / f"dx_{units}.png"
        assert result.plot(str(path), units=units) == str(path)
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and 5_000 < len(data) < 200_000
    with pytest.raises(pypto.PyptoError, match="units must be one of"):
        result.plot(str(tmp_path / "x.png"), units="bits")


def test_plot_without_matplotlib_is_a_clear_error(clean, tmp_path, monkeypatch, capsys):
    case, dy, w, ref = clean
    result = _compare(ref, dy, w)
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    with pytest.raises(pypto.PyptoError, match="pip install matplotlib"):
        result.plot(str(tmp_path / "x.png"))
    code, out, err = _main(capsys, "compare", str(HERE), "--plot", str(tmp_path / "x.png"))
    assert code == 2 and "pip install matplotlib" in err and out == ""


@pytest.mark.parametrize("order", ["sequential", "tile"])
def test_bf16_golden_records_the_order_of_pyptos_result_and_compare_reports_it(
    tmp_path, monkeypatch, order
):
    """pypto's own result in the case folder is summed in the order in force when it was
    written; the manifest says which, compare's text and JSON reports repeat it, and a manifest
    written before the field existed reads as "sequential" (0.1's only order)."""
    monkeypatch.setenv("PYPTO_SUM_ORDER", order)
    out = tmp_path / "case"
    args = ["--grad-output", "1,64,6,6", "--weight", "64,16,3,3", "--paddings", "1,1,1,1"]
    done = _cli("golden", *args, "--dtype", "bf16", "--seed", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sum_order"] == order
    dy = np.load(out / "input/grad_output.npy").view(ml_dtypes.bfloat16)
    w = np.load(out / "input/weight.npy").view(ml_dtypes.bfloat16)
    mine = np.load(out / "output/pypto.npy")
    if order == "tile":  # the recorded order is the one the result was summed in
        from support.sum_orders import dgrad_tile_order

        expected = dgrad_tile_order(dy, w, (6, 6), (1, 1), (1, 1), (1, 1)).view(np.uint16)
        np.testing.assert_array_equal(mine, expected)
    (out / "output/output.bin").write_bytes((out / "output/pypto.bin").read_bytes())
    monkeypatch.setenv("PYPTO_SUM_ORDER", "sequential")  # compare reads the manifest, not this
    done = _cli("compare", str(out), "--json", str(tmp_path / "r.json"))
    assert done.returncode == 0, done.stderr
    assert f"pypto's own result summed in order {order}" in done.stdout
    assert json.loads((tmp_path / "r.json").read_text())["sum_order"] == order
    del manifest["sum_order"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    done = _cli("compare", str(out))
    assert "pypto's own result summed in order sequential" in done.stdout
