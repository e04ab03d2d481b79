"""pypto.testing keeps its promise: every bad argument raises a PyptoError before anything is
computed, never a bare TypeError / ValueError / AttributeError (round 3, finding 13); torch
tensors are accepted without dtype= where their dtype tells fp16 from bf16."""

import math
import pathlib

import numpy as np
import pytest

import pypto
import pypto.testing as T
from pypto.pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info

DY_SHAPE, W_SHAPE = (1, 16, 5, 32), (16, 16, 3, 3)
ATTRS = ([1, 16, 5, 32], [1, 1], [1, 1, 1, 1], [1, 1])  # input_size, strides, paddings, dilations


def _inputs(dtype=np.float16):
    rng = np.random.default_rng(0)
    dy = rng.uniform(-1, 1, DY_SHAPE).astype(dtype)
    w = rng.uniform(-1, 1, W_SHAPE).astype(dtype)
    return dy, w


@pytest.fixture(scope="module")
def good():
    """(kwargs of a compare call that passes, its CompareResult)."""
    dy, w = _inputs()
    result = T.compare(np.zeros(ATTRS[0], np.float16), dy, w, *ATTRS)
    actual = result.reference  # pypto's own result: passes every standard
    kwargs = dict(
        actual=actual,
        grad_output=dy,
        weight=w,
        input_size=ATTRS[0],
        strides=ATTRS[1],
        paddings=ATTRS[2],
        dilations=ATTRS[3],
    )
    result = T.compare(**kwargs)
    assert result.passed
    return kwargs, result


# --- the fuzz: every public entry point x odd values ------------------------------------------
class _PathLikeAnsweringInt:
    def __fspath__(self):
        return 5


ODD_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    2**64,
    -(2**70),
    1.5,
    math.nan,
    math.inf,
    -0.0,
    1 + 2j,
    "",
    "abc",
    "fp16",
    "a\0b",
    b"x",
    [],
    [1, 2],
    [[1, 2], [3]],
    ((1, 2), (3,)),
    {},
    {"a": 1},
    np.zeros(3),
    np.zeros((2, 2), object),
    np.array("x"),
    np.float16(1),
    np.int64(-5),
    np.uint64(2**63),
    np.bool_(True),
    np.float64(math.nan),
    object(),
    _PathLikeAnsweringInt(),
    pathlib.Path("sub/x.png"),
]

COMPARE_ARGS = [
    "actual",
    "grad_output",
    "weight",
    "input_size",
    "strides",
    "paddings",
    "dilations",
    "dtype",
    "tiles",
    "standard",
    "golden",
    "reference",
]


def _outcome(call, allowed=()):
    """None when the call succeeded or raised a PyptoError (or an ``allowed`` type), else the
    bare exception."""
    try:
        call()
    except (pypto.PyptoError, *allowed):
        return None
    except Exception as exc:  # noqa: BLE001 -- what the test looks for
        return exc
    return None


def _entry_points(good):
    """(name, call(value)) for every argument of every public entry point of pypto.testing."""
    kwargs, result = good
    for name in COMPARE_ARGS:
        yield f"compare({name}=)", lambda v, n=name: T.compare(**{**kwargs, n: v}), ()
        # a failing verdict is assert_dgrad_close's AssertionError: its job, not a bad argument
        yield (
            f"assert_dgrad_close({name}=)",
            lambda v, n=name: T.assert_dgrad_close(**{**kwargs, n: v}),
            (AssertionError,),
        )
    yield "assert_dgrad_close(top=)", lambda v: T.assert_dgrad_close(**kwargs, top=v), ()
    yield "CompareResult.report(top=)", lambda v: result.report(top=v), ()
    yield "CompareResult.as_dict(top=)", lambda v: result.as_dict(top=v), ()
    yield "CompareResult.plot(path)", lambda v: result.plot(v), ()
    yield "CompareResult.plot(units=)", lambda v: result.plot("p.png", units=v), ()


def test_every_entry_point_raises_only_pypto_errors(good, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)  # the plot paths that are good land here
    bare = []
    for name, call, allowed in _entry_points(good):
        for value in ODD_VALUES:
            exc = _outcome(lambda: call(value), allowed)  # noqa: B023 - _outcome calls it at once
            if exc is not None:
                bare.append(f"{name} {value!r:.40}: {type(exc).__name__}: {exc}"[:200])
    assert not bare, "\n".join(bare)


@pytest.mark.parametrize(
    "tiles",
    [
        (ConvBpTileL1Info("a", 144, 16), ConvBpTileL0Info(16, 16, 16)),
        (ConvBpTileL1Info(16.0, 144, 16), ConvBpTileL0Info(16, 16, 16)),
        ((16.5, 144, 16), (16, 16, 16)),
        ((16, 144, 16), (16, 16, 16), [math.inf, 16, 16, 16]),
        ((16, 144, 16), (16, 16, 16), [16.5, 16, 16, 16]),
        ((16, 144, 16), (16, 16, 16), ["16", 16, 16, 16]),
        (ConvBpTileL0Info(16, 16, 16), ConvBpTileL0Info(16, 16, 16)),
    ],
    ids=repr,
)
def test_tile_values_the_op_refuses_are_refused(good, tiles):
    """Not read with int() (16.5 as 16, inf an OverflowError), nor handed on as a str."""
    kwargs, _ = good
    with pytest.raises(pypto.error.FeError):
        T.compare(**kwargs, tiles=tiles)


def test_numpy_integer_tiles_are_taken(good):
    kwargs, _ = good
    tiles = (
        (np.int64(16), np.int32(144), 16),
        ConvBpTileL0Info(np.int16(16), 16, 16),
        np.array([16, 16, 16, 16]),
    )
    assert T.compare(**kwargs, tiles=tiles).case.l1 == (16, 144, 16)


# --- the reproducers of finding 13 --------------------------------------------------------------
@pytest.mark.parametrize(
    "change, text",
    [
        (dict(standard=["dual-L0"]), "standard must be one of"),
        (dict(standard=np.array(["dual-L0"])), "standard must be one of"),
        (dict(golden=((1, 2), (3,))), "golden must be a float array"),
        (dict(dtype=np.zeros(2)), "dtype must be 'fp16', 'bf16'"),
    ],
)
def test_bad_compare_arguments(good, change, text):
    kwargs, _ = good
    with pytest.raises(pypto.PyptoError, match=text):
        T.compare(**{**kwargs, **change})


@pytest.mark.parametrize("top", [None, -1, 1.5, "3", True, [3]])
def test_bad_top(good, top):
    _, result = good
    for call in (result.report, result.as_dict):
        with pytest.raises(pypto.PyptoError, match="top must be an int >= 0"):
            call(top=top)


def test_good_top(good):
    _, result = good
    assert len(result.as_dict(top=np.int64(2))["localisation"]["worst"]) == 2
    assert len(result.as_dict(top=10**30)["localisation"]["worst"]) == math.prod(ATTRS[0])
    assert result.as_dict(top=0)["localisation"]["worst"] == []


def test_assert_dgrad_close_checks_top_before_comparing(good, monkeypatch):
    kwargs, _ = good
    failing = {**kwargs, "actual": np.zeros(ATTRS[0], np.float16)}

    def computed(*args):
        raise AssertionError("the comparison ran before the bad top was refused")

    from pypto._golden import judge  # where compare's judgement computes the golden

    monkeypatch.setattr(judge, "golden_dgrad", computed)
    with pytest.raises(pypto.PyptoError, match="top must be an int >= 0"):
        T.assert_dgrad_close(**failing, top=None)


@pytest.mark.parametrize(
    "path", [None, 5, b"dx.png", "", ".", "no/such/folder/dx.png", "dx.jpg2", "a\0b.png"], ids=repr
)
def test_bad_plot_paths_are_pypto_errors(good, tmp_path, monkeypatch, path):
    pytest.importorskip("matplotlib")
    _, result = good
    monkeypatch.chdir(tmp_path)
    with pytest.raises(pypto.PyptoError, match="plot"):
        result.plot(path)
    assert list(tmp_path.iterdir()) == []


def test_bad_plot_units(good, tmp_path):
    _, result = good
    for units in (np.array(["ulp"]), None, ["ulp"]):
        with pytest.raises(pypto.PyptoError, match="units must be one of"):
            result.plot(str(tmp_path / "dx.png"), units=units)


def test_a_good_plot_path_is_still_drawn(good, tmp_path):
    pytest.importorskip("matplotlib")
    _, result = good
    path = tmp_path / "dx.pdf"
    assert str(result.plot(path)) == str(path) and path.read_bytes()[:4] == b"%PDF"


# --- torch tensors without dtype= ---------------------------------------------------------------
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_torch_tensors_tell_their_dtype(dtype_name):
    torch = pytest.importorskip("torch", reason="the torch inputs of compare need torch")
    storage = getattr(torch, dtype_name)
    rng = np.random.default_rng(1)
    dy = torch.from_numpy(rng.uniform(-1, 1, DY_SHAPE).astype(np.float32)).to(storage)
    w = torch.from_numpy(rng.uniform(-1, 1, W_SHAPE).astype(np.float32)).to(storage)
    x = torch.empty(ATTRS[0], dtype=torch.float32)
    dx = torch.ops.aten.convolution_backward(
        dy.float(),
        x,
        w.float(),
        None,
        [1, 1],
        [1, 1],
        [1, 1],
        False,
        [0, 0],
        1,
        [True, False, False],
    )[0].to(storage)
    result = T.compare(dx, dy, w, *ATTRS)
    assert result.case.dtype == (pypto.DT_BF16 if dtype_name == "bfloat16" else pypto.DT_FP16)
    assert result.passed, result.report()
    assert T.compare(dx, dy, w, *ATTRS, dtype=result.case.dtype).passed


@pytest.mark.parametrize("dtype_name", ["int16", "uint16"])
def test_torch_16_bit_integers_still_need_dtype(dtype_name):
    torch = pytest.importorskip("torch", reason="the torch inputs of compare need torch")
    storage = getattr(torch, dtype_name)
    dy_bits, w_bits = (a.view(np.uint16) for a in _inputs(np.float16))
    dy = torch.from_numpy(dy_bits.view(np.int16)).view(storage)
    w = torch.from_numpy(w_bits.view(np.int16)).view(storage)
    actual = torch.zeros(ATTRS[0], dtype=storage)
    with pytest.raises(pypto.PyptoError, match="cannot tell fp16 from bf16"):
        T.compare(actual, dy, w, *ATTRS)
