"""The rule table of pypto.conv_backward_input (specification section 4), rule by rule.

Every rule gets edge values that pass (the call returns an ``input_size``-shaped Tensor) and
edge values that fail (a ``ConvBpInputError`` whose ``rule`` is the rule id and whose text is
exactly the documented message in upstream's ``"ErrCode: F0000x, <Kind>: <text>"`` format).
All tensors here are shape-only (``pypto.Tensor(shape, dtype)``): nothing is computed.
"""

import inspect
import re

import numpy as np
import pytest

import pypto
from pypto.pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info

FP16, BF16 = pypto.DT_FP16, pypto.DT_BF16
CODES = {"TypeError": "F00001", "ValueError": "F00002", "RuntimeError": "F00003"}
BUILTIN = {"TypeError": TypeError, "ValueError": ValueError, "RuntimeError": RuntimeError}
_UNSET = object()


def set_tiles(ml1=16, kl1=144, nl1=16, ml0=16, kl0=16, nl0=16):
    """Upstream UT tiles by default: L1 (M 16, K 144, N 16), L0 (16, 16, 16)."""
    pypto.set_convbp_input_tile_shapes(
        ConvBpTileL1Info(ml1, kl1, nl1), ConvBpTileL0Info(ml0, kl0, nl0)
    )


@pytest.fixture(autouse=True)
def legal_config():
    pypto.reset_options()
    set_tiles()
    pypto.set_vec_tile_shapes(16, 16, 16, 16)
    yield
    pypto.reset_options()


def call(
    go=(1, 16, 16, 16),
    w=(16, 16, 3, 3),
    size=(1, 16, 16, 16),
    strides=(1, 1),
    pads=(1, 1, 1, 1),
    dil=(1, 1),
    dtype=FP16,
    wdtype=None,
    out_dtype=_UNSET,
    groups=1,
    grad_output=_UNSET,
    weight=_UNSET,
):
    """conv_backward_input on shape-only tensors; defaults are upstream's fp16 UT case."""
    wdtype = dtype if wdtype is None else wdtype
    out_dtype = dtype if out_dtype is _UNSET else out_dtype
    if grad_output is _UNSET:
        grad_output = pypto.Tensor(list(go), dtype, "grad_output")
    if weight is _UNSET:
        weight = pypto.Tensor(list(w), wdtype, "weight")
    return pypto.conv_backward_input(
        grad_output, size, weight, out_dtype, strides, pads, dil, groups=groups
    )


def expect_pass(**kw):
    result = call(**kw)
    assert isinstance(result, pypto.Tensor)
    size = kw.get("size", (1, 16, 16, 16))
    assert result.shape == [int(v) for v in size]
    assert all(type(v) is int for v in result.shape)
    assert result.dtype == kw.get("out_dtype", kw.get("dtype", FP16))
    return result


def check_error(err, rule, text, kind="ValueError"):
    assert isinstance(err, pypto.error.ConvBpInputError)
    assert isinstance(err, pypto.PyptoError)
    assert isinstance(err, BUILTIN[kind])
    assert err.rule == rule, f"expected rule {rule}, got {err.rule}: {err}"
    expected = f"ErrCode: {CODES[kind]}, {kind}: {text}"
    assert re.fullmatch(re.escape(expected), str(err)), f"\n got: {err}\nwant: {expected}"
    assert err.err_code == int(CODES[kind], 16)


def expect_fail(rule, text, kind="ValueError", **kw):
    with pytest.raises(pypto.error.ConvBpInputError) as e:
        call(**kw)
    check_error(e.value, rule, text, kind)
    return e.value


def range_msg(i, name, lo, hi, v):
    """Upstream's range text (c1fab847 wording)."""
    return (
        f"The value of the {i}-th dimension of {name} must be in the range [{lo},{hi}]. "
        f"Current value: {v}."
    )


# ------------------------------------------------------------------------------------------------
# The table itself
# ------------------------------------------------------------------------------------------------
def test_rule_table_order_is_upstreams_order():
    """Upstream's order (python checks, then convbp_operation_impl.cpp @ f121cb47), with the
    rules upstream lacks where they stood: R1, A3, C1 and TS3 are checked in two places."""
    from pypto._core.rules import RULES

    assert [entry.rule for entry in RULES] == [
        "T1",
        "R1",  # grad_output and weight ranks (upstream's Python check)
        "R1",  # 2-D only (pypto only)
        "D1",
        "D2",
        "D3",
        "D4",
        "R1",  # input_size and attribute lengths (upstream's first C++ checks)
        "S1",
        "A3",  # padding below the dilated kernel, W then H
        "G1",
        "C1",  # Cout
        "A3",  # paddings in [0, 255]
        "A4",
        "A2",
        "A1",
        "S2",
        "C1",  # Cin (pypto only), then n
        "O1",  # W, then H
        "B1",
        "TS0",
        "TS2",
        "TS3",  # tileKL1 % 16
        "TS1",
        "TS3",  # tileKL1 % (16 * Kh * Kw)
        "TS4",
        "TS5",
        "TS6",
        "V1",
    ]


def test_rule_table_names_the_source_of_every_rule():
    from pypto._core.rules import NOTES, PYPTO_ONLY, RULE_IDS, RULES, SOURCE

    assert list(SOURCE) == list(RULE_IDS) == list(NOTES)
    assert set(RULE_IDS) == {entry.rule for entry in RULES}
    commits = ("8815cf8f", "eee4ab52", "c1fab847", "af796792")
    for entry in RULES:
        assert entry.what and entry.source
        assert entry.source.startswith(("upstream ", PYPTO_ONLY)), entry
        if entry.source.startswith("upstream "):
            assert any(commit in entry.source for commit in commits), entry
    for rule in ("A4", "B1", "TS0"):
        assert SOURCE[rule] == PYPTO_ONLY
    for rule, commit in (("D1", "8815cf8f"), ("S1", "c1fab847"), ("TS1", "eee4ab52")):
        assert SOURCE[rule].startswith(f"upstream {commit}")
    assert "af796792" in SOURCE["TS3"] and PYPTO_ONLY in SOURCE["C1"]
    # every rule upstream lacks, or whose text pypto keeps, says why
    for entry in RULES:
        if entry.source == PYPTO_ONLY:
            assert entry.note, entry


def test_signature_groups_keyword_only_and_no_bias():
    params = inspect.signature(pypto.conv_backward_input).parameters
    assert list(params) == [
        "grad_output",
        "input_size",
        "weight",
        "out_dtype",
        "strides",
        "paddings",
        "dilations",
        "groups",
    ]
    assert params["groups"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["groups"].default == 1


def test_baseline_passes_with_lists_and_tuples():
    expect_pass()
    r = call(
        go=[1, 16, 16, 16],
        w=[16, 16, 3, 3],
        size=[1, 16, 16, 16],
        strides=[1, 1],
        pads=[1, 1, 1, 1],
        dil=[1, 1],
    )
    assert r.shape == [1, 16, 16, 16] and r.dtype == FP16
    assert not r.has_data


# ------------------------------------------------------------------------------------------------
# T1: argument types
# ------------------------------------------------------------------------------------------------
def _cls(v):
    """Upstream's name of a value's type in its type errors: ``type(value).__name__``."""
    return type(v).__name__


@pytest.mark.parametrize(
    "name, value",
    [
        ("grad_output", None),
        ("grad_output", np.zeros((1, 16, 16, 16), np.float16)),
        ("grad_output", [1, 16, 16, 16]),
        ("weight", "weight"),
        ("weight", 3.0),
    ],
)
def test_T1_tensor_arguments(name, value):
    text = f"Argument '{name}' must be of type Tensor, but got {_cls(value)}."
    expect_fail("T1", text, "TypeError", **{name: value})


@pytest.mark.parametrize("value", [None, "DT_FP16", 6, np.float16, True])
def test_T1_out_dtype(value):
    text = f"Argument 'out_dtype' must be of type DataType, but got {_cls(value)}."
    expect_fail("T1", text, "TypeError", out_dtype=value)


@pytest.mark.parametrize(
    "arg, value",
    [
        ("size", None),
        ("size", "1,16,16,16"),
        ("strides", 1),
        ("strides", "11"),
        ("pads", {1, 2}),
        ("dil", np.array([1, 1])),
        ("dil", 1.0),
        ("pads", None),
    ],
)
def test_T1_not_a_list(arg, value):
    name = {"size": "input_size", "strides": "strides", "pads": "paddings", "dil": "dilations"}[arg]
    text = f"Argument '{name}' must be of type list, but got {_cls(value)}."
    expect_fail("T1", text, "TypeError", **{arg: value})


@pytest.mark.parametrize(
    "arg, value, bad",
    [
        ("size", [1, 16, 16.0, 16], 16.0),
        ("size", (1, 16, "16", 16), "16"),
        ("strides", [1, True], True),
        ("strides", [np.float64(1.0), 1], np.float64(1.0)),
        ("strides", [np.True_, 1], np.True_),
        ("pads", [[1, 1], [1, 1]], [1, 1]),
        ("pads", [1, 1, 1, None], None),
        ("dil", [1.5, 1], 1.5),
        ("dil", ("1", "1"), "1"),
        ("dil", [False, 1], False),
    ],
)
def test_T1_list_items(arg, value, bad):
    name = {"size": "input_size", "strides": "strides", "pads": "paddings", "dil": "dilations"}[arg]
    text = (
        f"Argument '{name}' must be a list of ints, but it holds {bad!r} "
        f"of type {type(bad).__name__}."
    )
    expect_fail("T1", text, "TypeError", **{arg: value})


@pytest.mark.parametrize("value", [None, 1.0, True, "1", [1], np.float32(1)])
def test_T1_groups(value):
    text = f"Argument 'groups' must be of type int, but got {_cls(value)}."
    expect_fail("T1", text, "TypeError", groups=value)


def test_T1_numpy_ints_are_accepted_as_ints():
    i64, i32, i8 = np.int64, np.int32, np.int8
    r = call(
        go=(i64(1), i32(16), i64(16), i8(16)),
        w=[i64(16), i64(16), i32(3), i32(3)],
        size=[i64(1), i32(16), i64(16), np.uint16(16)],
        strides=(i64(1), i32(1)),
        pads=[i8(1), i64(1), i32(1), np.uint8(1)],
        dil=[i64(1), i32(1)],
        groups=i64(1),
    )
    assert r.shape == [1, 16, 16, 16]
    assert all(type(v) is int for v in r.shape)


def test_T1_junk_never_raises_a_bare_python_exception():
    junk = [None, 1.5, "x", [[1]], True, {}, object(), np.float64(2.0), b"ab"]
    for arg in ("grad_output", "weight", "size", "out_dtype", "strides", "pads", "dil", "groups"):
        for value in junk:
            with pytest.raises(pypto.PyptoError) as e:
                call(**{arg: value})
            assert isinstance(e.value, pypto.error.ConvBpTypeError), (arg, value, e.value)
            assert e.value.rule == "T1"
            assert str(e.value).startswith("ErrCode: F00001, TypeError: Argument ")


# ------------------------------------------------------------------------------------------------
# R1: ranks
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw, g, w",
    [
        (dict(go=(16, 16, 16)), 3, 4),
        (dict(go=(1, 1, 16, 16, 16)), 5, 4),
        (dict(go=()), 0, 4),
        (dict(w=(16, 16, 3, 3, 1)), 4, 5),
        (dict(w=(16, 16, 3)), 4, 3),
        (dict(go=(1, 16, 16, 16, 1, 1), w=(16, 16, 3, 3, 1, 1)), 6, 6),
        (dict(go=(1, 16), w=(16, 16)), 2, 2),
    ],
)
def test_R1_tensor_ranks(kw, g, w):
    # upstream's Python check (kept an F00002 ValueError: see the table's note)
    text = (
        "Tensor dimension mismatch. Expect grad_output_dim == weight_dim and both in "
        f"[3, 4, 5], got grad_output_dim: {g}, weight_dim: {w}."
    )
    expect_fail("R1", text, **kw)


@pytest.mark.parametrize(
    "kw, got",
    [
        (dict(go=(1, 16, 16), w=(16, 16, 3), size=(1, 16, 16), strides=[1], pads=[1, 1]), 3),
        (dict(go=(1, 16, 1, 16, 16), w=(16, 16, 1, 3, 3), size=(1, 16, 1, 16, 16)), 5),
    ],
)
def test_R1_only_2d(kw, got):
    # upstream runs 1-D and 3-D convolutions; the user's page only 2-D (pypto only)
    text = (
        f"Input illegal grad_output dim:{got}, which must be 4 "
        "(only 2-D convolution in NCHW is supported)."
    )
    expect_fail("R1", text, **kw)


@pytest.mark.parametrize("size", [(1, 16, 16), [], (1, 16, 16, 16, 1)])
def test_R1_input_size_rank(size):
    # upstream's text prints the weight's rank: it checks weight and input together
    text = "Input illegal weight or input dim:4, which must be equal to grad_output dim."
    expect_fail("R1", text, size=size)


@pytest.mark.parametrize(
    "kw, d, s, p",
    [
        (dict(strides=[1, 1, 1]), 2, 3, 4),
        (dict(strides=[1]), 2, 1, 4),
        (dict(pads=[1, 1]), 2, 2, 2),
        (dict(pads=(1, 1, 1, 1, 1)), 2, 2, 5),
        (dict(dil=[1]), 1, 2, 4),
        (dict(dil=()), 0, 2, 4),
    ],
)
def test_R1_attribute_lengths(kw, d, s, p):
    text = (
        f"Input illegal dilations size:{d}, strides size:{s}, paddings size:{p}, which must "
        "correspond to grad_output dim:4."
    )
    expect_fail("R1", text, **kw)


# ------------------------------------------------------------------------------------------------
# D1-D4: data types
# ------------------------------------------------------------------------------------------------
def test_D_bf16_and_fp16_pass():
    expect_pass(dtype=BF16)
    expect_pass(dtype=FP16)


@pytest.mark.parametrize("dt", [pypto.DT_INT8, pypto.DT_FP32, pypto.DT_DOUBLE, pypto.DT_BOOL])
def test_D1_grad_output_dtype(dt):
    text = f"Input tensor data type must in [bf16, fp16],but Input tensor got DataType.{dt.name}"
    expect_fail("D1", text, dtype=dt)


@pytest.mark.parametrize("dt", [pypto.DT_INT8, pypto.DT_FP32])
def test_D2_weight_dtype(dt):
    text = f"Weight tensor data type must in [bf16, fp16],but Weight tensor got DataType.{dt.name}"
    expect_fail("D2", text, dtype=FP16, wdtype=dt)


def test_D3_same_dtype():
    expect_fail(
        "D3",
        "grad_output and weight data types must be consistent, but got grad_output: "
        "DataType.DT_FP16, weight: DataType.DT_BF16",
        dtype=FP16,
        wdtype=BF16,
    )
    expect_fail(
        "D3",
        "grad_output and weight data types must be consistent, but got grad_output: "
        "DataType.DT_BF16, weight: DataType.DT_FP16",
        dtype=BF16,
        wdtype=FP16,
        out_dtype=BF16,
    )


@pytest.mark.parametrize("dt, out", [(FP16, BF16), (BF16, FP16), (FP16, pypto.DT_FP32)])
def test_D4_out_dtype(dt, out):
    text = (
        f"Output data type must be consistent with grad_output, but got out_dtype: "
        f"DataType.{out.name}, grad_output: DataType.{dt.name}"
    )
    expect_fail("D4", text, dtype=dt, out_dtype=out)


# ------------------------------------------------------------------------------------------------
# S1: dimensions in [1, 1000000]
# ------------------------------------------------------------------------------------------------
def test_S1_all_ones_passes():
    expect_pass(go=(1, 1, 1, 1), w=(1, 1, 1, 1), size=(1, 1, 1, 1), pads=(0, 0, 0, 0))


@pytest.mark.parametrize(
    "kw",
    [
        dict(go=(1000000, 16, 16, 16), size=(1000000, 16, 16, 16)),  # N
        dict(go=(1, 1000000, 16, 16), w=(1000000, 16, 3, 3)),  # Cout
        dict(w=(16, 1000000, 3, 3), size=(1, 1000000, 16, 16)),  # Cin
        dict(
            go=(1, 16, 1000000, 1), w=(16, 16, 1, 1), size=(1, 16, 1000000, 1), pads=(0, 0, 0, 0)
        ),  # Hout, Hin
        dict(
            go=(1, 16, 1, 1000000), w=(16, 16, 1, 1), size=(1, 16, 1, 1000000), pads=(0, 0, 0, 0)
        ),  # Wout, Win
    ],
)
def test_S1_one_million_passes(kw):
    expect_pass(**kw)


@pytest.mark.parametrize(
    "kw, name, i, v",
    [
        (dict(go=(0, 16, 16, 16)), "grad_output", 0, 0),
        (dict(go=(1, 16, 16, 0)), "grad_output", 3, 0),
        (dict(go=(1000001, 16, 16, 16), size=(1000001, 16, 16, 16)), "grad_output", 0, 1000001),
        (dict(go=(1, 16, 1000001, 16)), "grad_output", 2, 1000001),
        (dict(w=(0, 16, 3, 3)), "weight", 0, 0),
        (dict(w=(16, 16, 3, 0)), "weight", 3, 0),
        (dict(w=(16, 1000001, 3, 3), size=(1, 1000001, 16, 16)), "weight", 1, 1000001),
        # upstream names input_size "input"
        (dict(size=(1, 0, 16, 16)), "input", 1, 0),
        (dict(size=(1, 16, 16, 1000001)), "input", 3, 1000001),
        (dict(size=(1, 16, -5, 16)), "input", 2, -5),
    ],
)
def test_S1_out_of_range_fails(kw, name, i, v):
    expect_fail("S1", range_msg(i, name, 1, 1000000, v), **kw)


def test_S1_dynamic_dim_fails_with_hint():
    text = range_msg(2, "grad_output", 1, 1000000, -1) + " (dynamic shapes are not supported)"
    expect_fail("S1", text, go=(1, 16, -1, 16))


# ------------------------------------------------------------------------------------------------
# S2: kernel size
# ------------------------------------------------------------------------------------------------
def test_S2_kh_255_passes():
    set_tiles(kl1=16 * 255)
    expect_pass(go=(1, 16, 1, 16), w=(16, 16, 255, 1), size=(1, 16, 255, 16), pads=(0, 0, 0, 0))


def test_S2_kw_255_passes():
    set_tiles(kl1=16 * 255)
    expect_pass(go=(1, 16, 16, 1), w=(16, 16, 1, 255), size=(1, 16, 16, 255), pads=(0, 0, 0, 0))


def test_S2_largest_kernel_that_fits_l1_passes():
    # 31 x 33 = 1023 taps: the weight block alone is 16*1023*16*2 = 523776 bytes of L1.
    set_tiles(ml1=16, kl1=16 * 31 * 33, nl1=16)
    expect_pass(go=(1, 16, 1, 1), w=(16, 16, 31, 33), size=(1, 16, 31, 33), pads=(0, 0, 0, 0))


def test_S2_kh_256_fails():
    expect_fail(
        "S2",
        "Weight shapes do not satisfy Load3D's limits: kh=256, kw=1, which must be <= 255.",
        go=(1, 16, 1, 16),
        w=(16, 16, 256, 1),
        size=(1, 16, 256, 16),
        pads=(0, 0, 0, 0),
    )


def test_S2_kw_256_fails():
    expect_fail(
        "S2",
        "Weight shapes do not satisfy Load3D's limits: kh=3, kw=256, which must be <= 255.",
        w=(16, 16, 3, 256),
    )


@pytest.mark.parametrize(
    "kh, kw, product", [(255, 255, 1040400), (64, 64, 65536), (4096 // 64 + 1, 64, 65 * 64 * 16)]
)
def test_S2_load3d_product_fails(kh, kw, product):
    text = (
        f"Weight shapes do not satisfy Load3D's limits: kh*kw*k0={product}"
        "(k0 = 16, mmad K block size), which must be <=65535."
    )
    expect_fail(
        "S2", text, go=(1, 16, 1, 1), w=(16, 16, kh, kw), size=(1, 16, kh, kw), pads=(0, 0, 0, 0)
    )


@pytest.mark.parametrize("dtype", [FP16, BF16])
def test_S2_64x63_passes_s2(dtype):
    # 64*63*16 = 64512 <= 65535: S2 holds. No full call can pass with it, because TS3 forces
    # tileKL1 >= 16*64*63 and TS2 tileNL1 >= 16, which already overflows L1 (TS6).
    set_tiles(kl1=16 * 64 * 63)
    err = expect_fail(
        "TS6",
        "MinL1LoadSize > L1size, current MinL1LoadSize: 2064416, L1size: 524288.",
        go=(1, 16, 1, 1),
        w=(16, 16, 64, 63),
        size=(1, 16, 64, 63),
        pads=(0, 0, 0, 0),
        dtype=dtype,
    )
    assert err.rule != "S2"


# ------------------------------------------------------------------------------------------------
# A1, A2: strides and dilations in [1, 63] (indices as upstream's: of [1, h, w])
# ------------------------------------------------------------------------------------------------
def test_A1_stride_1_passes():
    expect_pass(strides=[1, 1])


def test_A1_stride_63_passes():
    # HinMin = (2-1)*63 - 2 + 2 + 1 = 64
    expect_pass(go=(1, 16, 2, 2), size=(1, 16, 64, 64), strides=[63, 63])
    # HinMax = 64 + 62 = 126
    expect_pass(go=(1, 16, 2, 2), size=(1, 16, 126, 126), strides=[63, 63])


@pytest.mark.parametrize(
    "strides, i, v",
    [([0, 1], 1, 0), ([1, 0], 2, 0), ([63, 64], 2, 64), ([64, 1], 1, 64), ([-1, 1], 1, -1)],
)
def test_A1_stride_out_of_range_fails(strides, i, v):
    expect_fail("A1", range_msg(i, "strides", 1, 63, v), strides=strides)


def test_A2_dilation_63_passes():
    # extent (3-1)*63+1 = 127; HinMin = (4-1)*1 - 2 + 126 + 1 = 128
    expect_pass(go=(1, 16, 4, 4), size=(1, 16, 128, 128), dil=[63, 63])


@pytest.mark.parametrize(
    "dil, i, v",
    [([0, 1], 1, 0), ([1, 0], 2, 0), ([64, 1], 1, 64), ([1, 64], 2, 64), ([1, -2], 2, -2)],
)
def test_A2_dilation_out_of_range_fails(dil, i, v):
    # a dilation below 1 leaves its axis's padding check to A2 (the table's note): with pad 1
    # upstream would report the padding against a "weight value after dilation" of 1 or less
    expect_fail("A2", range_msg(i, "dilations", 1, 63, v), dil=dil)


# ------------------------------------------------------------------------------------------------
# A3: paddings in [0, 255] and below the dilated kernel
# ------------------------------------------------------------------------------------------------
def test_A3_zero_padding_passes():
    expect_pass(go=(1, 16, 14, 14), size=(1, 16, 16, 16), pads=[0, 0, 0, 0])


def test_A3_padding_equal_to_dilated_kernel_minus_one_passes():
    set_tiles(ml1=12)  # tileML1 <= Win (TS1)
    # K=3, d=1: pad 2 == (K-1)*d; Hin = 15 - 4 + 2 + 1 = 14
    expect_pass(size=(1, 16, 14, 14), pads=[2, 2, 2, 2])
    # K=3, d=2: pad 4 == (K-1)*d; Hin = 15 - 8 + 4 + 1 = 12
    expect_pass(size=(1, 16, 12, 12), pads=[4, 4, 4, 4], dil=[2, 2])


def test_A3_padding_255_passes():
    # Kh=6, dh=63: extent 316 > 255; Hin = 199 - 510 + 315 + 1 = 5
    set_tiles(kl1=16 * 6)
    expect_pass(
        go=(1, 16, 200, 1), w=(16, 16, 6, 1), size=(1, 16, 5, 1), pads=[255, 255, 0, 0], dil=[63, 1]
    )


@pytest.mark.parametrize(
    "kw, i, v",
    [
        # a dilated kernel larger than 256, so that the padding passes the check before
        (dict(pads=[256, 256, 1, 1], w=(16, 16, 6, 3), dil=[63, 1]), 2, 256),
        (dict(pads=[1, 1, 1, 256], w=(16, 16, 3, 6), dil=[1, 63]), 5, 256),
        (dict(pads=[1, 1, -1, -1]), 4, -1),
        (dict(pads=[-3, -3, 1, 1]), 2, -3),
    ],
)
def test_A3_padding_out_of_range_fails(kw, i, v):
    # indices as upstream's: of [0, 0, top, bottom, left, right]
    expect_fail("A3", range_msg(i, "paddings", 0, 255, v), **kw)


def test_A3_padding_over_255_is_first_the_padding_against_the_kernel():
    expect_fail(
        "A3",
        "The value of the H dimension of weight must be > padding. Current weight value "
        "after dilation: 3, padding value: 256 and 256.",
        pads=[256, 256, 1, 1],
    )


def pad_msg(axis, extent, before, after):
    """Upstream's text (c1fab847 wording)."""
    return (
        f"The value of the {axis} dimension of weight must be > padding. Current weight value "
        f"after dilation: {extent}, padding value: {before} and {after}."
    )


def test_A3_padding_equal_to_dilated_kernel_fails():
    expect_fail("A3", pad_msg("H", 3, 3, 3), pads=[3, 3, 1, 1])
    expect_fail("A3", pad_msg("W", 5, 5, 5), pads=[1, 1, 5, 5], dil=[1, 2])
    expect_fail("A3", pad_msg("W", 1, 1, 1), w=(16, 16, 3, 1), pads=[1, 1, 1, 1])


def test_A3_W_is_checked_before_H():
    expect_fail("A3", pad_msg("W", 3, 3, 3), pads=[3, 3, 3, 3])
    expect_fail("A3", pad_msg("W", 3, 1, 4), pads=[5, 5, 1, 4])


# ------------------------------------------------------------------------------------------------
# A4, G1
# ------------------------------------------------------------------------------------------------
def test_A4_symmetric_passes_with_different_h_and_w():
    # H pad 2, W pad 0: Hin = 15 - 4 + 3 = 14, Win = 15 + 3 = 18
    expect_pass(size=(1, 16, 14, 18), pads=[2, 2, 0, 0])


@pytest.mark.parametrize("pads", [[1, 0, 1, 1], [0, 1, 1, 1], [1, 1, 2, 1], [1, 1, 0, 1]])
def test_A4_asymmetric_fails(pads):
    text = (
        "Only symmetric padding is supported: paddings [top, bottom, left, right] needs "
        f"top == bottom and left == right, but got {pads}."
    )
    expect_fail("A4", text, pads=pads)


def test_A4_message_shows_a_tuple_as_a_list():
    expect_fail(
        "A4",
        "Only symmetric padding is supported: paddings [top, bottom, left, right] "
        "needs top == bottom and left == right, but got [0, 1, 1, 1].",
        pads=(0, 1, 1, 1),
    )


def test_G1_groups_1_passes():
    expect_pass(groups=1)
    expect_pass(groups=np.int64(1))


@pytest.mark.parametrize("groups", [2, 0, -1, 16])
def test_G1_other_groups_fail(groups):
    expect_fail(
        "G1",
        f"Invalid groups:{groups}, expected range [1,1] (only groups=1 is supported).",
        groups=groups,
    )


# ------------------------------------------------------------------------------------------------
# C1: channels and batch
# ------------------------------------------------------------------------------------------------
def test_C1_matching_channels_pass():
    expect_pass(go=(3, 32, 16, 16), w=(32, 48, 3, 3), size=(3, 48, 16, 16))


def test_C1_cout_mismatch_fails():
    expect_fail(
        "C1", "Cout of gradOutput (16) is not equal to Cout of weight (32).", w=(32, 16, 3, 3)
    )


def test_C1_cin_mismatch_fails():
    expect_fail(
        "C1",
        "Input illegal cin size:32. input_size[1] must equal Cin of weight (weight.shape[1] = 16).",
        size=(1, 32, 16, 16),
    )


def test_C1_batch_mismatch_fails():
    expect_fail(
        "C1",
        "Input illegal n size:2. input_size[0] must equal the batch of grad_output "
        "(grad_output.shape[0] = 1).",
        size=(2, 16, 16, 16),
    )


# ------------------------------------------------------------------------------------------------
# O1: input_size in [HinMin, HinMax] x [WinMin, WinMax]
# ------------------------------------------------------------------------------------------------
# dy 7x7, K 3, stride 2, pad 1: HinMin = 6*2 - 2 + 2 + 1 = 13, HinMax = 14.
S2_CASE = dict(go=(1, 16, 7, 7), strides=[2, 2])
# dy 7x7, K 3, stride 3, pad 1: HinMin = 6*3 - 2 + 2 + 1 = 19, HinMax = 21.
S3_CASE = dict(go=(1, 16, 7, 7), strides=[3, 3])


@pytest.mark.parametrize(
    "case, h, w",
    [
        (S2_CASE, 13, 13),
        (S2_CASE, 14, 14),
        (S2_CASE, 13, 14),
        (S2_CASE, 14, 13),
        (S3_CASE, 19, 19),
        (S3_CASE, 20, 21),
        (S3_CASE, 21, 19),
    ],
)
def test_O1_both_ends_pass(case, h, w):
    set_tiles(ml1=13)  # tileML1 <= Win for every Win here (TS1)
    expect_pass(size=(1, 16, h, w), **case)


@pytest.mark.parametrize(
    "case, h, w, axis, lo, hi, s",
    [
        (S2_CASE, 12, 13, "h", 13, 14, 2),
        (S2_CASE, 15, 13, "h", 13, 14, 2),
        (S2_CASE, 13, 12, "w", 13, 14, 2),
        (S2_CASE, 14, 15, "w", 13, 14, 2),
        (S3_CASE, 18, 19, "h", 19, 21, 3),
        (S3_CASE, 22, 19, "h", 19, 21, 3),
        (S3_CASE, 21, 18, "w", 19, 21, 3),
        (S3_CASE, 19, 22, "w", 19, 21, 3),
    ],
)
def test_O1_outside_range_fails(case, h, w, axis, lo, hi, s):
    v, idx, word = (h, 2, "height") if axis == "h" else (w, 3, "width")
    text = (
        f"Input illegal {axis}in size:{v}. input_size[{idx}] must be in [{lo}, {hi}] for "
        f"grad_output {word} 7, kernel 3, stride {s}, paddings 1+1, dilation 1."
    )
    err = expect_fail("O1", text, size=(1, 16, h, w), **case)
    assert f"[{lo}, {hi}]" in str(err)


def test_O1_range_with_dilation_and_asymmetric_axes():
    # H: dy 5, K 2, s 3, p 0, d 1 -> [14, 16];  W: dy 4, K 5, s 1, p 2, d 2 -> [8, 8]
    set_tiles(ml1=8, kl1=160)
    kw = dict(go=(1, 16, 5, 4), w=(16, 16, 2, 5), strides=[3, 1], pads=[0, 0, 2, 2], dil=[1, 2])
    for h in (14, 15, 16):
        expect_pass(size=(1, 16, h, 8), **kw)
    expect_fail(
        "O1",
        "Input illegal hin size:17. input_size[2] must be in [14, 16] for "
        "grad_output height 5, kernel 2, stride 3, paddings 0+0, dilation 1.",
        size=(1, 16, 17, 8),
        **kw,
    )
    expect_fail(
        "O1",
        "Input illegal win size:9. input_size[3] must be in [8, 8] for "
        "grad_output width 4, kernel 5, stride 1, paddings 2+2, dilation 2.",
        size=(1, 16, 14, 9),
        **kw,
    )


def test_O1_range_clipped_below_at_1():
    # dy 1, K 3, s 3, p 2: HinMin = 0 - 4 + 2 + 1 = -1, HinMax = 1 -> valid sizes {1}
    kw = dict(go=(1, 16, 1, 16), strides=[3, 1], pads=[2, 2, 1, 1])
    expect_pass(size=(1, 16, 1, 16), **kw)
    expect_fail(
        "O1",
        "Input illegal hin size:2. input_size[2] must be in [1, 1] for "
        "grad_output height 1, kernel 3, stride 3, paddings 2+2, dilation 1.",
        size=(1, 16, 2, 16),
        **kw,
    )


def test_O1_range_above_the_dimension_limit_is_empty():
    # dy height 1000000, K 1, s 2: HinMin = 1999999 > 1000000
    expect_fail(
        "O1",
        "Input illegal hin size:1000000. input_size[2] must be in empty: no input "
        "size gives this output for grad_output height 1000000, kernel 1, stride 2, "
        "paddings 0+0, dilation 1.",
        go=(1, 16, 1000000, 1),
        w=(16, 16, 1, 1),
        size=(1, 16, 1000000, 1),
        strides=[2, 1],
        pads=[0, 0, 0, 0],
    )


# ------------------------------------------------------------------------------------------------
# B1: no bias, static shapes
# ------------------------------------------------------------------------------------------------
def test_B1_shapes_are_plain_ints_so_B1_cannot_fire_publicly():
    t = pypto.Tensor([np.int64(1), np.int32(16), np.uint8(16), 16], FP16)
    assert all(type(v) is int for v in t.shape)
    expect_pass(grad_output=t)


def test_B1_non_int_shape_entries_fail():
    # Only reachable through a Tensor subclass whose shape holds a non-int.
    class OddTensor(pypto.Tensor):
        @property
        def shape(self):
            return [1, 16, 16.0, 16]

    go = OddTensor([1, 16, 16, 16], FP16)
    expect_fail(
        "B1",
        "Dynamic shape is not supported: grad_output has shape [1, 16, 16.0, 16].",
        grad_output=go,
    )


# ------------------------------------------------------------------------------------------------
# TS0: tiles set
# ------------------------------------------------------------------------------------------------
def test_TS0_no_tiles():
    pypto.reset_options()
    err = expect_fail(
        "TS0",
        "Tile shapes are not set: call pypto.set_convbp_input_tile_shapes("
        "tile_l1_info, tile_l0_info) before pypto.conv_backward_input.",
        "RuntimeError",
    )
    assert "set_convbp_input_tile_shapes" in str(err)


def test_TS0_no_tiles_even_with_vec_tiles():
    pypto.reset_options()
    pypto.set_vec_tile_shapes(16, 16, 16, 16)
    expect_fail(
        "TS0",
        "Tile shapes are not set: call pypto.set_convbp_input_tile_shapes("
        "tile_l1_info, tile_l0_info) before pypto.conv_backward_input.",
        "RuntimeError",
    )


def test_TS0_all_zero_tiles_count_as_not_set():
    set_tiles(0, 0, 0, 0, 0, 0)
    expect_fail(
        "TS0",
        "Tile shapes are not set: call pypto.set_convbp_input_tile_shapes("
        "tile_l1_info, tile_l0_info) before pypto.conv_backward_input.",
        "RuntimeError",
    )


def test_TS0_no_vec_tiles():
    pypto.reset_options()
    set_tiles()
    err = expect_fail(
        "TS0",
        "Vector tile shapes are not set: call pypto.set_vec_tile_shapes(...) "
        "(4 or 5 ints, e.g. 16, 16, 16, 16) before pypto.conv_backward_input.",
        "RuntimeError",
    )
    assert "set_vec_tile_shapes" in str(err)


def test_TS0_empty_vec_tiles():
    pypto.set_vec_tile_shapes()
    expect_fail(
        "TS0",
        "Vector tile shapes are not set: call pypto.set_vec_tile_shapes(...) "
        "(4 or 5 ints, e.g. 16, 16, 16, 16) before pypto.conv_backward_input.",
        "RuntimeError",
    )


def test_TS0_non_int_tile_values():
    pypto.set_convbp_input_tile_shapes(
        ConvBpTileL1Info(16.0, 144, 16), ConvBpTileL0Info(16, 16, 16)
    )
    expect_fail("TS0", "Invalid tileML1:16.0, a tile size must be an int.", "RuntimeError")
    pypto.set_convbp_input_tile_shapes(
        ConvBpTileL1Info(16, 144, 16), ConvBpTileL0Info(16, None, 16)
    )
    expect_fail("TS0", "Invalid tileKL0:None, a tile size must be an int.", "RuntimeError")


def test_TS0_numpy_int_tiles_pass():
    set_tiles(*(np.int64(v) for v in (16, 144, 16, 16, 16, 16)))
    expect_pass()


# ------------------------------------------------------------------------------------------------
# TS1: tileML1 <= Win or tileML1 % Win == 0   (Win = 13 below)
# ------------------------------------------------------------------------------------------------
W13 = dict(go=(1, 16, 7, 7), size=(1, 16, 13, 13), strides=[2, 2])


@pytest.mark.parametrize("ml1", [1, 12, 13, 26, 39, 169, 182])
def test_TS1_passes(ml1):
    set_tiles(ml1=ml1)
    expect_pass(**W13)


@pytest.mark.parametrize("ml1", [14, 16, 40, 170])
def test_TS1_not_a_multiple_fails(ml1):
    set_tiles(ml1=ml1)
    expect_fail("TS1", f"tileML1({ml1}) should be less than win(13) or be divisible by win", **W13)


@pytest.mark.parametrize("ml1", [0, -13])
def test_TS1_non_positive_fails(ml1):
    set_tiles(ml1=ml1)
    expect_fail("TS1", f"Invalid tileML1:{ml1}, expected range [1,+inf).", **W13)


def test_TS1_win_16_edges():
    set_tiles(ml1=16)
    expect_pass()
    set_tiles(ml1=48)
    expect_pass()
    set_tiles(ml1=17)
    expect_fail("TS1", "tileML1(17) should be less than win(16) or be divisible by win")


# ------------------------------------------------------------------------------------------------
# TS2: tileNL1 % 16 == 0
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("nl1", [16, 32, 256])
def test_TS2_passes(nl1):
    set_tiles(nl1=nl1)
    expect_pass()


@pytest.mark.parametrize("nl1", [24, 8, 17])
def test_TS2_unaligned_fails(nl1):
    set_tiles(nl1=nl1)
    expect_fail("TS2", f"Invalid tileNL1:{nl1}, requires 16-element alignment.")


def test_TS2_non_positive_fails():
    set_tiles(nl1=0)
    expect_fail("TS2", "Invalid tileNL1:0, expected range [1,+inf).")


# ------------------------------------------------------------------------------------------------
# TS3: tileKL1 % (16 * Kh * Kw) == 0, in upstream's two steps: % 16 (before TS1), then
# % (16 * Kh * Kw) (after TS1)
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kl1", [144, 288, 144 * 10])
def test_TS3_passes(kl1):
    set_tiles(kl1=kl1)
    expect_pass()


@pytest.mark.parametrize("kl1", [16, 128, 160, 288 + 16])
def test_TS3_not_a_multiple_of_the_taps_fails(kl1):
    set_tiles(kl1=kl1)
    expect_fail("TS3", f"tileKL1({kl1}) should be divisible by Cout0 * Hk * Wk")


@pytest.mark.parametrize("kl1", [143, 8, 150])
def test_TS3_not_a_multiple_of_16_fails(kl1):
    set_tiles(kl1=kl1)
    expect_fail("TS3", f"Invalid tileKL1:{kl1}, requires 16-element alignment.")


def test_TS3_non_square_kernel():
    kw = dict(w=(16, 16, 1, 5), pads=[0, 0, 2, 2])
    set_tiles(kl1=80)
    expect_pass(**kw)
    set_tiles(kl1=144)
    expect_fail("TS3", "tileKL1(144) should be divisible by Cout0 * Hk * Wk", **kw)


def test_TS3_non_positive_fails():
    set_tiles(kl1=0)
    expect_fail("TS3", "Invalid tileKL1:0, expected range [1,+inf).")


# ------------------------------------------------------------------------------------------------
# TS4: L0 tiles: positive multiples of 16, within the L1 tiles
# ------------------------------------------------------------------------------------------------
def test_TS4_l0_equal_to_l1_passes():
    set_tiles(ml1=16, kl1=144, nl1=16, ml0=16, kl0=144, nl0=16)
    expect_pass()


def test_TS4_ml0_may_reach_the_aligned_ml1():
    set_tiles(ml1=13, ml0=16)  # CeilAlign(13, 16) = 16
    expect_pass(**W13)
    set_tiles(ml1=39, ml0=48)  # CeilAlign(39, 16) = 48
    expect_pass(**W13)


@pytest.mark.parametrize(
    "tiles, name, v, upper",
    [
        (dict(ml1=16, ml0=32), "tileML0", 32, 16),
        (dict(ml1=13, ml0=32), "tileML0", 32, 16),
        (dict(ml0=0), "tileML0", 0, 16),
        (dict(ml0=-16), "tileML0", -16, 16),
        (dict(kl1=144, kl0=160), "tileKL0", 160, 144),
        (dict(kl0=0), "tileKL0", 0, 144),
        (dict(nl1=16, nl0=32), "tileNL0", 32, 16),
        (dict(nl0=0), "tileNL0", 0, 16),
    ],
)
def test_TS4_range_fails(tiles, name, v, upper):
    set_tiles(**tiles)
    kw = W13 if tiles.get("ml1") == 13 else {}
    expect_fail("TS4", f"Invalid {name}:{v}, expected range [1,{upper}].", **kw)


@pytest.mark.parametrize(
    "tiles, name, v",
    [
        (dict(ml0=8), "tileML0", 8),
        (dict(ml1=48, ml0=40), "tileML0", 40),
        (dict(kl0=24), "tileKL0", 24),
        (dict(kl0=136), "tileKL0", 136),
        (dict(nl1=32, nl0=8), "tileNL0", 8),
        (dict(nl1=32, nl0=17), "tileNL0", 17),
    ],
)
def test_TS4_alignment_fails(tiles, name, v):
    set_tiles(**tiles)
    expect_fail("TS4", f"Invalid {name}:{v}, requires 16-element alignment.")


# ------------------------------------------------------------------------------------------------
# TS5: L0A / L0B / L0C   (1x1 kernel, Hin = Win = 16)
# ------------------------------------------------------------------------------------------------
K1 = dict(w=(16, 16, 1, 1), pads=[0, 0, 0, 0])


def l0_msg(buf, a, av, b, bv, tail):
    size = 131072 if buf == "L0C" else 65536
    return (
        f"Shape does not satisfy {buf} load constraints, {a}({av}) × {b}({bv}) × dtypesize "
        f"≤ {buf} Size({size}). {tail}"
    )


@pytest.mark.parametrize("dtype", [FP16, BF16])
def test_TS5_l0a_at_limit_passes(dtype):
    set_tiles(ml1=128, kl1=256, nl1=16, ml0=128, kl0=256, nl0=16)  # 128*256*2 = 65536
    expect_pass(dtype=dtype, **K1)


def test_TS5_l0a_over_limit_fails():
    set_tiles(ml1=144, kl1=256, nl1=16, ml0=144, kl0=256, nl0=16)  # 73728
    expect_fail(
        "TS5", l0_msg("L0A", "tileML0", 144, "tileKL0", 256, "(dtypesize 2: 73728 bytes)"), **K1
    )
    set_tiles(ml1=128, kl1=272, nl1=16, ml0=128, kl0=272, nl0=16)  # 69632
    expect_fail(
        "TS5",
        l0_msg("L0A", "tileML0", 128, "tileKL0", 272, "(dtypesize 2: 69632 bytes)"),
        dtype=BF16,
        **K1,
    )


def test_TS5_l0b_at_limit_passes():
    set_tiles(ml1=16, kl1=256, nl1=128, ml0=16, kl0=256, nl0=128)  # 256*128*2 = 65536
    expect_pass(**K1)


def test_TS5_l0b_over_limit_fails():
    set_tiles(ml1=16, kl1=256, nl1=144, ml0=16, kl0=256, nl0=144)  # 73728
    expect_fail(
        "TS5", l0_msg("L0B", "tileKL0", 256, "tileNL0", 144, "(dtypesize 2: 73728 bytes)"), **K1
    )


def test_TS5_l0c_at_limit_passes():
    set_tiles(ml1=128, kl1=16, nl1=256, ml0=128, kl0=16, nl0=256)  # 128*256*4 = 131072
    expect_pass(**K1)


def test_TS5_l0c_over_limit_fails():
    set_tiles(ml1=144, kl1=16, nl1=256, ml0=144, kl0=16, nl0=256)  # 147456
    expect_fail(
        "TS5",
        l0_msg("L0C", "tileML0", 144, "tileNL0", 256, "(fp32 accumulator: 147456 bytes)"),
        **K1,
    )


# ------------------------------------------------------------------------------------------------
# TS6: L1 buffer
# ------------------------------------------------------------------------------------------------
def test_TS6_exactly_at_limit_passes():
    # 1x1, Win 16, tileML1 16: houtL1 1, woutL1 16, coutL1 8192 -> (8192*16 + 16*8192)*2 = 524288
    set_tiles(ml1=16, kl1=8192, nl1=16)
    expect_pass(**K1)


def test_TS6_over_limit_fails():
    set_tiles(ml1=16, kl1=8208, nl1=16)  # (8208*16 + 16*8208)*2 = 525312
    expect_fail(
        "TS6", "MinL1LoadSize > L1size, current MinL1LoadSize: 525312, L1size: 524288.", **K1
    )


def test_TS6_dy_window_is_clipped_to_the_zero_inserted_dy():
    # Upstream C++ UT shape: dy 14x14, K 3, s 2, p 1, d 3, input 32x32; tileML1 64 (two rows).
    # houtL1 = min(2 + 6, 27) = 8, woutL1 = min(32 + 6, 27) = 27, coutL1 = kl1 / 9.
    # bytes = (kl1*16 + 8*27*kl1/9) * 2 = 11520 * (kl1/144)
    kw = dict(go=(1, 16, 14, 14), size=(1, 16, 32, 32), strides=[2, 2], dil=[3, 3])
    set_tiles(ml1=64, kl1=144 * 45, nl1=16)  # 518400 bytes
    expect_pass(**kw)
    set_tiles(ml1=64, kl1=144 * 46, nl1=16)  # 529920 bytes
    expect_fail(
        "TS6", "MinL1LoadSize > L1size, current MinL1LoadSize: 529920, L1size: 524288.", **kw
    )


# ------------------------------------------------------------------------------------------------
# V1: vector tiles
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "vec",
    [
        (16, 16, 16, 16),
        (16, 16, 1, 16, 16),
        (1, 1, 1, 16),
        (7, 3, 5, 32),
        (np.int64(16), 16, 16, np.int32(16)),
    ],
)
def test_V1_passes(vec):
    pypto.set_vec_tile_shapes(*vec)
    expect_pass()


@pytest.mark.parametrize("vec", [(16, 16, 16), (16,), (16, 16, 16, 16, 16, 16)])
def test_V1_wrong_count_fails(vec):
    pypto.set_vec_tile_shapes(*vec)
    expect_fail(
        "V1",
        f"Invalid vec_tile_shapes:{list(vec)}, expected 4 or 5 values (one per "
        "dimension of NCHW, or NCDHW with D = 1).",
    )


@pytest.mark.parametrize(
    "vec, i, v", [((16, 0, 16, 16), 1, 0), ((-16, 16, 16, 16), 0, -16), ((16, 16, 1, 16, 0), 4, 0)]
)
def test_V1_non_positive_entry_fails(vec, i, v):
    pypto.set_vec_tile_shapes(*vec)
    expect_fail(
        "V1",
        f"The value of the {i}-th dimension of vec_tile_shapes must be in the range "
        f"[1,+inf). Current value: {v}.",
    )


@pytest.mark.parametrize("last", [8, 24, 1])
def test_V1_last_not_multiple_of_16_fails(last):
    pypto.set_vec_tile_shapes(16, 16, 16, last)
    expect_fail(
        "V1",
        "The last dimension of `tile_shape` should be 32-byte aligned. "
        f"vec_tile_shapes[-1] = {last} is not a multiple of 16.",
    )


# ------------------------------------------------------------------------------------------------
# Order: a call broken in two rules reports the earlier one
# ------------------------------------------------------------------------------------------------
def _rule_of(**kw):
    with pytest.raises(pypto.error.ConvBpInputError) as e:
        call(**kw)
    return e.value.rule


@pytest.mark.parametrize(
    "first, kw",
    [
        ("T1", dict(strides=[1.0], dtype=pypto.DT_INT8)),  # + R1, D1
        ("T1", dict(groups=None, go=(0, 16, 16, 16))),  # + S1
        ("T1", dict(pads="1111", groups=1.0)),  # T1's own order: the lists, then groups
        ("R1", dict(go=(16, 16, 16), dtype=pypto.DT_INT8)),  # ranks + D1
        ("R1", dict(go=(1, 16, 16), w=(16, 16, 3), dtype=pypto.DT_INT8)),  # 2-D only + D1
        ("D1", dict(size=(1, 16, 16), dtype=pypto.DT_INT8)),  # + R1 (input_size rank)
        ("D4", dict(pads=[1, 1], out_dtype=BF16)),  # + R1 (attribute lengths)
        ("R1", dict(pads=[1, 1], go=(1, 16, 0, 16))),  # + S1
        ("D1", dict(dtype=pypto.DT_INT8, wdtype=pypto.DT_FP32)),  # + D2, D3
        ("D2", dict(dtype=FP16, wdtype=pypto.DT_INT8)),  # + D3
        ("D3", dict(dtype=FP16, wdtype=BF16, out_dtype=BF16)),  # + D4
        ("D4", dict(out_dtype=BF16, go=(0, 16, 16, 16))),  # + S1
        ("S1", dict(w=(16, 16, 0, 256))),  # + S2
        ("S1", dict(size=(1, 16, 0, 16), pads=[5, 5, 1, 1])),  # + A3
        ("A3", dict(pads=[3, 3, 1, 1], groups=2)),  # padding vs kernel + G1
        ("G1", dict(groups=2, w=(32, 16, 3, 3))),  # + C1 (Cout)
        ("C1", dict(w=(32, 16, 3, 3), pads=[-1, -1, 1, 1])),  # Cout + A3 (range)
        ("A3", dict(pads=[-1, -2, 1, 1])),  # range + A4
        ("A4", dict(pads=[1, 0, 1, 1], dil=[64, 1])),  # + A2
        ("A2", dict(dil=[64, 1], strides=[0, 1])),  # + A1
        ("A1", dict(strides=[0, 1], w=(16, 16, 256, 3))),  # + S2
        ("S2", dict(w=(16, 16, 256, 3), size=(1, 32, 16, 16))),  # + C1 (Cin)
        ("C1", dict(size=(2, 16, 99, 16))),  # n + O1
        ("O1", dict(size=(1, 16, 99, 16), pads=[1, 1, 1, 1])),  # + TS (below)
    ],
)
def test_order_first_rule_reported(first, kw):
    if first == "O1":
        pypto.reset_options()  # + TS0
    assert _rule_of(**kw) == first


@pytest.mark.parametrize(
    "first, tiles, vec",
    [
        ("TS2", dict(ml1=17, nl1=24), None),  # + TS1
        ("TS2", dict(nl1=24, kl1=8), None),  # + TS3
        ("TS3", dict(kl1=8, ml1=17), None),  # tileKL1 % 16 + TS1
        ("TS1", dict(ml1=17, kl1=16), None),  # + TS3 (tileKL1 % 16*Kh*Kw)
        ("TS3", dict(kl1=16, ml0=8), None),  # + TS4
        ("TS4", dict(ml1=256, ml0=248, kl1=288, kl0=256), None),  # + TS5 (L0A 126976)
        ("TS5", dict(ml1=144, ml0=144, kl1=144 * 60, kl0=256), None),  # + TS6
        ("TS6", dict(kl1=144 * 100), (16, 16, 16)),  # + V1
        ("TS1", dict(ml1=17), (16, 16, 16, 8)),  # + V1
    ],
)
def test_order_tile_rules(first, tiles, vec):
    set_tiles(**tiles)
    if vec is not None:
        pypto.set_vec_tile_shapes(*vec)
    assert _rule_of() == first


def test_order_within_C1_cout_reported_before_cin_and_batch():
    expect_fail(
        "C1",
        "Cout of gradOutput (16) is not equal to Cout of weight (32).",
        w=(32, 16, 3, 3),
        size=(2, 48, 16, 16),
    )
    expect_fail(
        "C1",
        "Input illegal cin size:48. input_size[1] must equal Cin of weight (weight.shape[1] = 16).",
        size=(2, 48, 16, 16),
    )


# ------------------------------------------------------------------------------------------------
# conv_backward_input_size_range
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "go, w, s, p, d, expected",
    [
        ((1, 16, 7, 7), (16, 16, 3, 3), [2, 2], [1, 1, 1, 1], [1, 1], ((13, 14), (13, 14))),
        ((1, 16, 16, 16), (16, 16, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], ((16, 16), (16, 16))),
        ((1, 16, 14, 14), (16, 16, 3, 3), [2, 2], [1, 1, 1, 1], [3, 3], ((31, 32), (31, 32))),
        ((1, 16, 14, 14), (16, 16, 3, 3), [1, 1], [0, 0, 0, 0], [1, 1], ((16, 16), (16, 16))),
        ((1, 1, 5, 4), (1, 1, 2, 5), (3, 1), (0, 0, 2, 2), (1, 2), ((14, 16), (8, 8))),
        ((2, 8, 7, 7), (8, 4, 3, 3), [3, 3], [1, 1, 1, 1], [1, 1], ((19, 21), (19, 21))),
        ((1, 1, 1, 1), (1, 1, 3, 3), [3, 3], [2, 2, 2, 2], [1, 1], ((1, 1), (1, 1))),  # clipped
        ((1, 1, 2, 2), (1, 1, 1, 1), [63, 63], [0, 0, 0, 0], [1, 1], ((64, 126), (64, 126))),
    ],
)
def test_size_range_hand_computed(go, w, s, p, d, expected):
    assert pypto.conv_backward_input_size_range(go, w, s, p, d) == expected


def test_size_range_agrees_with_the_op():
    go, w, s, p, d = (1, 16, 7, 7), (16, 16, 3, 3), [3, 2], [1, 1, 0, 0], [1, 2]
    (hlo, hhi), (wlo, whi) = pypto.conv_backward_input_size_range(go, w, s, p, d)
    # H: 6*3 - 2 + 2 + 1 = 19..21;  W: 6*2 - 0 + 4 + 1 = 17..18
    assert (hlo, hhi, wlo, whi) == (19, 21, 17, 18)
    kw = dict(go=go, w=w, strides=s, pads=p, dil=d)
    for h in (hlo, hhi):
        for wi in (wlo, whi):
            expect_pass(size=(1, 16, h, wi), **kw)
    for h, wi in ((hlo - 1, wlo), (hhi + 1, wlo), (hlo, wlo - 1), (hlo, whi + 1)):
        assert _rule_of(size=(1, 16, h, wi), **kw) == "O1"


@pytest.mark.parametrize(
    "args, rule, kind",
    [
        (
            ((1, 16, 7, 7), (16, 16, 3, 3), [0, 1], [1, 1, 1, 1], [1, 1]),
            "A1",
            pypto.error.ConvBpValueError,
        ),
        (
            ((1, 16, 7, 7), (16, 16, 3, 3), [1, 1], [1, 1, 1, 1], [64, 1]),
            "A2",
            pypto.error.ConvBpValueError,
        ),
        (
            ((1, 16, 7, 7), (16, 16, 3, 3), [1, 1], [1, 1, 256, 1], [1, 1]),
            "A3",
            pypto.error.ConvBpValueError,
        ),
        (
            ((1, 16, 7), (16, 16, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1]),
            "R1",
            pypto.error.ConvBpValueError,
        ),
        (
            ((1, 16, 7, 7), (16, 16, 3, 3), [1, 1], [1, 1], [1, 1]),
            "R1",
            pypto.error.ConvBpValueError,
        ),
        (
            ((1, 16, 0, 7), (16, 16, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1]),
            "S1",
            pypto.error.ConvBpValueError,
        ),
        (
            ((1, 16, 7, 7), (16, 16, 3, 3), "11", [1, 1, 1, 1], [1, 1]),
            "T1",
            pypto.error.ConvBpTypeError,
        ),
        (((1, 16, 7, 7), None, [1, 1], [1, 1, 1, 1], [1, 1]), "T1", pypto.error.ConvBpTypeError),
        (
            ((1, 16, 7, 7), (16, 16, 3, 3), [1.0, 1], [1, 1, 1, 1], [1, 1]),
            "T1",
            pypto.error.ConvBpTypeError,
        ),
        (
            ((1, 16, 1000000, 1), (16, 16, 1, 1), [2, 1], [0, 0, 0, 0], [1, 1]),
            "O1",
            pypto.error.ConvBpValueError,
        ),
    ],
)
def test_size_range_invalid_arguments(args, rule, kind):
    with pytest.raises(kind) as e:
        pypto.conv_backward_input_size_range(*args)
    assert e.value.rule == rule
    assert isinstance(e.value, pypto.PyptoError)


def test_size_range_messages():
    with pytest.raises(pypto.error.ConvBpValueError) as e:
        pypto.conv_backward_input_size_range(
            (1, 16, 7, 7), (16, 16, 3, 3), [0, 1], [1, 1, 1, 1], [1, 1]
        )
    check_error(e.value, "A1", range_msg(1, "strides", 1, 63, 0))
    with pytest.raises(pypto.error.ConvBpValueError) as e:
        pypto.conv_backward_input_size_range(
            (1, 16, 1000000, 1), (16, 16, 1, 1), [2, 1], [0, 0, 0, 0], [1, 1]
        )
    check_error(
        e.value,
        "O1",
        "No input size along H gives grad_output size 1000000 with these "
        "kernel, stride, padding and dilation values.",
    )


def test_size_range_accepts_numpy_ints_and_returns_ints():
    r = pypto.conv_backward_input_size_range(
        [np.int64(1), 16, 7, 7], (16, 16, np.int32(3), 3), [np.int64(2), 2], [1, 1, 1, 1], [1, 1]
    )
    assert r == ((13, 14), (13, 14))
    assert all(type(v) is int for pair in r for v in pair)


# ------------------------------------------------------------------------------------------------
# Upstream UT (python/tests/ut/operation/test_convbp_op.py) inside pypto.function
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype, go, w, size, strides, pads, dil",
    [
        (FP16, (1, 16, 16, 16), (16, 16, 3, 3), [1, 16, 16, 16], [1, 1], [1, 1, 1, 1], [1, 1]),
        (BF16, (1, 16, 16, 16), (16, 16, 3, 3), [1, 16, 16, 16], [1, 1], [1, 1, 1, 1], [1, 1]),
        (FP16, (1, 16, 16, 16), (16, 16, 3, 3), [1, 16, 18, 18], [1, 1], [1, 1, 1, 1], [2, 2]),
        (FP16, (1, 16, 14, 14), (16, 16, 3, 3), [1, 16, 16, 16], [1, 1], [0, 0, 0, 0], [1, 1]),
        (FP16, (2, 16, 16, 16), (16, 16, 3, 3), [2, 16, 16, 16], [1, 1], [1, 1, 1, 1], [1, 1]),
    ],
    ids=["fp16", "bf16", "dilation", "no_pad", "fp16_batch"],
)
def test_upstream_ut_graph_cases(dtype, go, w, size, strides, pads, dil):
    pypto.reset_options()
    grad_output = pypto.tensor(go, dtype, "grad_output")
    weight = pypto.tensor(w, dtype, "weight")
    with pypto.function("CONV_BP", grad_output, weight):
        pypto.set_convbp_input_tile_shapes(
            ConvBpTileL1Info(tileML1=16, tileNL1=16, tileKL1=144),
            ConvBpTileL0Info(tileML0=16, tileNL0=16, tileKL0=16),
        )
        pypto.set_vec_tile_shapes(16, 16, 16, 16)
        result = pypto.conv_backward_input(
            grad_output, size, weight, dtype, strides, pads, dil, groups=1
        )
    assert isinstance(result, pypto.tensor)
    assert result.shape == size
    assert result.dtype == dtype
    # the tiles were set inside the function scope only
    assert pypto.get_vec_tile_shapes() == []


@pytest.mark.parametrize(
    "dtype, go, size, strides, dil",
    [
        (FP16, (1, 16, 14, 14), [1, 16, 32, 32], [2, 2], [3, 3]),
        (BF16, (1, 16, 14, 14), [1, 16, 32, 32], [2, 2], [3, 3]),
        (FP16, (1, 16, 32, 32), [1, 16, 32, 32], [1, 1], [1, 1]),
    ],
    ids=["cpp_fp16", "cpp_bf16", "cpp_fp16_stride1"],
)
def test_upstream_cpp_ut_cases(dtype, go, size, strides, dil):
    # C++ UT: L1 (16,144,16), L0 (16,144,16) positional M, K, N -> tileKL0 = 144
    grad_output = pypto.tensor(go, dtype)
    weight = pypto.tensor((16, 16, 3, 3), dtype)
    with pypto.function("CONV_BP", grad_output, weight):
        pypto.set_convbp_input_tile_shapes(
            ConvBpTileL1Info(16, 144, 16), ConvBpTileL0Info(16, 144, 16)
        )
        pypto.set_vec_tile_shapes(16, 16, 16, 16)
        result = pypto.conv_backward_input(
            grad_output, size, weight, dtype, strides, [1, 1, 1, 1], dil
        )
    assert result.shape == size


@pytest.mark.parametrize(
    "go_dt, w_dt, out_dt, pattern",
    [
        (pypto.DT_INT8, pypto.DT_INT8, pypto.DT_INT8, "Input tensor data type must in"),
        (FP16, pypto.DT_INT8, FP16, "Weight tensor data type must in"),
        (FP16, BF16, FP16, "grad_output and weight data types must be consistent"),
        (FP16, FP16, BF16, "Output data type must be consistent with grad_output"),
    ],
    ids=[
        "grad_output_unsupported_dtype",
        "weight_unsupported_dtype",
        "grad_weight_dtype_inconsistency",
        "out_dtype_grad_output_inconsistency",
    ],
)
def test_upstream_ut_dtype_errors(go_dt, w_dt, out_dt, pattern):
    pypto.reset_options()  # upstream: outside any function, no tiles set
    grad_output = pypto.tensor([1, 16, 16, 16], go_dt)
    weight = pypto.tensor([16, 16, 3, 3], w_dt)
    with pytest.raises(pypto.PyptoError, match=pattern):
        pypto.conv_backward_input(
            grad_output, [1, 16, 16, 16], weight, out_dt, [1, 1], [1, 1, 1, 1], [1, 1], groups=1
        )


def test_error_inside_function_is_reraised_unchanged():
    grad_output = pypto.tensor([1, 16, 16, 16], FP16)
    weight = pypto.tensor([16, 16, 3, 3], BF16)
    with pytest.raises(pypto.error.ConvBpInputError) as e:
        with pypto.function("CONV_BP", grad_output, weight):
            pypto.conv_backward_input(
                grad_output, [1, 16, 16, 16], weight, FP16, [1, 1], [1, 1, 1, 1], [1, 1]
            )
    check_error(
        e.value,
        "D3",
        "grad_output and weight data types must be consistent, but got "
        "grad_output: DataType.DT_FP16, weight: DataType.DT_BF16",
    )


@pytest.mark.parametrize("bad", ["xyz", 3, None.__class__])
def test_tensor_format_must_be_a_tile_op_format(bad):
    with pytest.raises(pypto.PyptoError, match="TileOpFormat"):
        pypto.Tensor([1, 16, 4, 4], pypto.DT_FP16, format=bad)
    assert (
        pypto.Tensor([1], pypto.DT_FP16, format=pypto.TileOpFormat.TILEOP_NZ).format
        == pypto.TileOpFormat.TILEOP_NZ
    )
