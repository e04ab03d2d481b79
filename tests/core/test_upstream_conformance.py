"""Issue 29: pypto's checks against upstream PyPTO's newest validation code.

Upstream: hicann/pypto, ``framework/src/interface/operation/convbp_operation_impl.cpp`` @
f121cb47 (check order) with the texts of 8815cf8f, eee4ab52, c1fab847 and af796792, after the
Python checks of ``python/pypto/op/convbp.py`` @ 8815cf8f. One test per difference the issue
measured (A1-A11), each with upstream's exact text; where pypto keeps its own (the rule table
says why), the test pins pypto's text and the table's note. Then one problem broken in many
rules at once, repaired one fault at a time: the faults are reported in upstream's order.
"""

import pytest

import pypto
from pypto._core import rules
from pypto.pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info

FP16, BF16 = pypto.DT_FP16, pypto.DT_BF16


@pytest.fixture(autouse=True)
def legal_config():
    pypto.reset_options()
    set_tiles()
    pypto.set_vec_tile_shapes(16, 16, 16, 16)
    yield
    pypto.reset_options()


def set_tiles(ml1=16, kl1=144, nl1=16, ml0=16, kl0=16, nl0=16):
    pypto.set_convbp_input_tile_shapes(
        ConvBpTileL1Info(ml1, kl1, nl1), ConvBpTileL0Info(ml0, kl0, nl0)
    )


def call(
    go=(1, 16, 16, 16),
    w=(16, 16, 3, 3),
    size=(1, 16, 16, 16),
    strides=(1, 1),
    pads=(1, 1, 1, 1),
    dil=(1, 1),
    dtype=FP16,
    out_dtype=None,
    groups=1,
    grad_output=None,
):
    """Upstream's fp16 UT case by default (shape-only tensors)."""
    if grad_output is None:
        grad_output = pypto.Tensor(list(go), dtype)
    out_dtype = dtype if out_dtype is None else out_dtype
    return pypto.conv_backward_input(
        grad_output,
        size,
        pypto.Tensor(list(w), dtype),
        out_dtype,
        strides,
        pads,
        dil,
        groups=groups,
    )


def error_of(**kw):
    with pytest.raises(pypto.error.ConvBpInputError) as e:
        call(**kw)
    return e.value


def text_of(err):
    """The message after upstream's "ErrCode: F0000x, <Kind>: " prefix."""
    return err.msg.partition(f"{err.builtin.__name__}: ")[2]


def expect(rule, upstream_text, **kw):
    """The call fails in ``rule`` with exactly upstream's text."""
    err = error_of(**kw)
    assert (err.rule, text_of(err)) == (rule, upstream_text)
    return err


# --- A1: tileKL1, in two steps (af796792) ---------------------------------------------------------
def test_A1_tileKL1_not_a_multiple_of_the_taps():
    set_tiles(kl1=16)  # 3x3 kernel: 16 * Kh * Kw = 144
    expect("TS3", "tileKL1(16) should be divisible by Cout0 * Hk * Wk")


def test_A1_tileKL1_not_a_multiple_of_16_first():
    set_tiles(kl1=8)
    expect("TS3", "Invalid tileKL1:8, requires 16-element alignment.")


# --- A2: c1fab847's wording -----------------------------------------------------------------------
def test_A2_kernel_limit_wording():
    expect(
        "S2",
        "Weight shapes do not satisfy Load3D's limits: kh=256, kw=3, which must be <= 255.",
        w=(16, 16, 256, 3),
    )
    expect(
        "S2",
        "Weight shapes do not satisfy Load3D's limits: kh*kw*k0=65536(k0 = 16, mmad K block "
        "size), which must be <=65535.",
        go=(1, 16, 1, 1),
        w=(16, 16, 64, 64),
        size=(1, 16, 64, 64),
        pads=(0, 0, 0, 0),
    )


def test_A2_range_wording():
    expect(
        "S1",
        "The value of the 0-th dimension of grad_output must be in the range [1,1000000]. "
        "Current value: 0.",
        go=(0, 16, 16, 16),
    )


# --- A3: the padding against the dilated kernel: W before H, c1fab847's wording -------------------
def test_A3_padding_against_the_dilated_kernel():
    expect(
        "A3",
        "The value of the W dimension of weight must be > padding. Current weight value after "
        "dilation: 3, padding value: 3 and 3.",
        pads=[3, 3, 3, 3],
    )
    expect(
        "A3",
        "The value of the H dimension of weight must be > padding. Current weight value after "
        "dilation: 5, padding value: 5 and 5.",
        pads=[5, 5, 1, 1],
        dil=[2, 1],
    )


# --- A4: the input size: width before height ------------------------------------------------------
def test_A4_width_reported_first():
    err = error_of(size=(1, 16, 99, 20))
    assert err.rule == "O1"
    # upstream's text, then pypto's valid range (the specification asks for it; the table's note)
    assert text_of(err).startswith("Input illegal win size:20. ")
    assert text_of(err) == (
        "Input illegal win size:20. input_size[3] must be in [16, 16] for grad_output width 16, "
        "kernel 3, stride 1, paddings 1+1, dilation 1."
    )
    assert "valid range" in rules.NOTES["O1"]


# --- A5: the tile checks' order -------------------------------------------------------------------
def test_A5_tile_check_order():
    # tileNL1, tileKL1 % 16, tileML1, tileKL1 % (16 Kh Kw): each broken with all the later ones
    set_tiles(ml1=17, kl1=8, nl1=24)
    expect("TS2", "Invalid tileNL1:24, requires 16-element alignment.")
    set_tiles(ml1=17, kl1=8)
    expect("TS3", "Invalid tileKL1:8, requires 16-element alignment.")
    set_tiles(ml1=17, kl1=16)
    expect("TS1", "tileML1(17) should be less than win(16) or be divisible by win")
    set_tiles(kl1=16)
    expect("TS3", "tileKL1(16) should be divisible by Cout0 * Hk * Wk")


# --- A6: the order of the other checks (f121cb47) -------------------------------------------------
def test_A6_padding_against_the_kernel_before_the_padding_range():
    expect(
        "A3",
        "The value of the W dimension of weight must be > padding. Current weight value after "
        "dilation: 3, padding value: 1 and 300.",
        pads=[1, 1, 1, 300],
    )


def test_A6_attributes_before_the_output_shape():
    # groups, Cout, the ranges and the kernel limits all come before n, W and H
    expect("G1", "Invalid groups:2, expected range [1,1] (only groups=1 is supported).", groups=2)
    expect(
        "C1",
        "Cout of gradOutput (16) is not equal to Cout of weight (32).",
        w=(32, 16, 3, 3),
        size=(2, 16, 99, 20),
    )
    expect(
        "A1",
        "The value of the 2-th dimension of strides must be in the range [1,63]. Current value: 0.",
        strides=[1, 0],
        size=(2, 16, 99, 20),
    )


# --- A7: indices of the lists padded to 3-D -------------------------------------------------------
def test_A7_indices_count_in_the_padded_lists():
    expect(
        "A1",
        "The value of the 1-th dimension of strides must be in the range [1,63]. "
        "Current value: 64.",
        strides=[64, 1],
    )
    expect(
        "A2",
        "The value of the 2-th dimension of dilations must be in the range [1,63]. "
        "Current value: 64.",
        dil=[1, 64],
    )
    expect(
        "A3",
        "The value of the 2-th dimension of paddings must be in the range [0,255]. "
        "Current value: -1.",
        pads=[-1, -1, 1, 1],
    )


# --- A8: the input size is "input" ----------------------------------------------------------------
def test_A8_input_size_is_named_input():
    expect(
        "S1",
        "The value of the 2-th dimension of input must be in the range [1,1000000]. "
        "Current value: 0.",
        size=(1, 16, 0, 16),
    )


# --- A9: type errors name the class: type(value).__name__ -----------------------------------------
@pytest.mark.parametrize(
    "kw, text",
    [
        (dict(groups="1"), "Argument 'groups' must be of type int, but got str."),
        (dict(strides=1), "Argument 'strides' must be of type list, but got int."),
        (dict(out_dtype=6), "Argument 'out_dtype' must be of type DataType, but got int."),
        (dict(grad_output=[1, 16]), "Argument 'grad_output' must be of type Tensor, but got list."),
        # upstream's Python order: the lists before groups
        (dict(pads="1111", groups=1.5), "Argument 'paddings' must be of type list, but got str."),
    ],
)
def test_A9_type_errors(kw, text):
    err = expect("T1", text, **kw)
    assert str(err) == f"ErrCode: F00001, TypeError: {text}"


# --- A10: tensor ranks: upstream's text, pypto's kind (the table's note) --------------------------
def test_A10_rank_mismatch():
    err = expect(
        "R1",
        "Tensor dimension mismatch. Expect grad_output_dim == weight_dim and both in [3, 4, 5], "
        "got grad_output_dim: 4, weight_dim: 3.",
        w=(16, 16, 3),
    )
    # upstream raises F00003 RuntimeError; pypto keeps R1 a ValueError (F00002)
    assert isinstance(err, ValueError) and err.err_code == 0xF00002
    assert "F00003 RuntimeError" in rules.NOTES["R1"]


# --- A11: error codes: pypto's one format (the table's ERROR_KINDS_NOTE) --------------------------
def test_A11_error_codes_keep_pypto_format():
    for kw, code, kind in (
        (dict(groups=None), "F00001", "TypeError"),
        (dict(strides=[0, 1]), "F00002", "ValueError"),  # upstream: CHECK F00008 OUT_OF_RANGE
    ):
        assert str(error_of(**kw)).startswith(f"ErrCode: {code}, {kind}: ")
    set_tiles(ml1=144, ml0=144, kl1=288, kl0=256)  # L0A: upstream's ASSERT FC6101
    err = error_of(w=(16, 16, 1, 1), pads=(0, 0, 0, 0))
    assert err.rule == "TS5" and str(err).startswith(
        "ErrCode: F00002, ValueError: Shape does not satisfy L0A load constraints"
    )
    for token in ("CHECK FAILED", "FC6101", "F00003 RuntimeError"):
        assert token in rules.ERROR_KINDS_NOTE


# --- the order, on one problem broken in many rules -----------------------------------------------
def test_many_faults_are_reported_in_upstreams_order():
    """Start with a call broken in every place below; repair the reported fault, call again:
    the faults come out in upstream's order (its Python checks, then f121cb47's C++ checks),
    with the rules upstream lacks where pypto has them."""
    args = dict(
        go=(1, 16, 0, 16),
        w=(32, 16, 256, 3),
        size=(2, 32, 99, 20),
        strides=[0, 1],
        pads=[-1, -1, 3, 3],
        dil=[64, 1, 1],
        out_dtype=BF16,
        groups="2",
    )
    tiles = dict(ml1=17, kl1=8, nl1=24, ml0=8)
    steps = [
        ("T1", "Argument 'groups' must be of type int, but got str.", dict(groups=2)),
        (
            "D4",
            "Output data type must be consistent with grad_output, but got out_dtype: "
            "DataType.DT_BF16, grad_output: DataType.DT_FP16",
            dict(out_dtype=None),
        ),
        (
            "R1",
            "Input illegal dilations size:3, strides size:2, paddings size:4, which must "
            "correspond to grad_output dim:4.",
            dict(dil=[64, 1]),
        ),
        (
            "S1",
            "The value of the 2-th dimension of grad_output must be in the range [1,1000000]. "
            "Current value: 0.",
            dict(go=(1, 16, 16, 16)),
        ),
        (
            "A3",
            "The value of the W dimension of weight must be > padding. Current weight value "
            "after dilation: 3, padding value: 3 and 3.",
            dict(pads=[-1, -1, 1, 1]),
        ),
        (
            "G1",
            "Invalid groups:2, expected range [1,1] (only groups=1 is supported).",
            dict(groups=1),
        ),
        (
            "C1",
            "Cout of gradOutput (16) is not equal to Cout of weight (32).",
            dict(w=(16, 16, 256, 3)),
        ),
        (
            "A3",
            "The value of the 2-th dimension of paddings must be in the range [0,255]. "
            "Current value: -1.",
            dict(pads=[1, 1, 1, 1]),
        ),
        (
            "A2",
            "The value of the 1-th dimension of dilations must be in the range [1,63]. "
            "Current value: 64.",
            dict(dil=[1, 1]),
        ),
        (
            "A1",
            "The value of the 1-th dimension of strides must be in the range [1,63]. "
            "Current value: 0.",
            dict(strides=[1, 1]),
        ),
        (
            "S2",
            "Weight shapes do not satisfy Load3D's limits: kh=256, kw=3, which must be <= 255.",
            dict(w=(16, 16, 3, 3)),
        ),
        (  # pypto only, where it stood: after the kernel limits, before n
            "C1",
            "Input illegal cin size:32. input_size[1] must equal Cin of weight "
            "(weight.shape[1] = 16).",
            dict(size=(2, 16, 99, 20)),
        ),
        (
            "C1",
            "Input illegal n size:2. input_size[0] must equal the batch of grad_output "
            "(grad_output.shape[0] = 1).",
            dict(size=(1, 16, 99, 20)),
        ),
        (
            "O1",
            "Input illegal win size:20. input_size[3] must be in [16, 16] for grad_output "
            "width 16, kernel 3, stride 1, paddings 1+1, dilation 1.",
            dict(size=(1, 16, 99, 16)),
        ),
        (
            "O1",
            "Input illegal hin size:99. input_size[2] must be in [16, 16] for grad_output "
            "height 16, kernel 3, stride 1, paddings 1+1, dilation 1.",
            dict(size=(1, 16, 16, 16)),
        ),
        ("TS2", "Invalid tileNL1:24, requires 16-element alignment.", dict(nl1=16)),
        ("TS3", "Invalid tileKL1:8, requires 16-element alignment.", dict(kl1=16)),
        (
            "TS1",
            "tileML1(17) should be less than win(16) or be divisible by win",
            dict(ml1=16),
        ),
        ("TS3", "tileKL1(16) should be divisible by Cout0 * Hk * Wk", dict(kl1=144)),
        ("TS4", "Invalid tileML0:8, requires 16-element alignment.", dict(ml0=16)),
    ]
    for rule, text, fix in steps:
        set_tiles(**tiles)
        err = error_of(**args)
        assert (err.rule, text_of(err)) == (rule, text)
        for key, value in fix.items():
            (tiles if key in ("ml1", "kl1", "nl1", "ml0", "kl0", "nl0") else args)[key] = value
    set_tiles(**tiles)
    assert call(**args).shape == [1, 16, 16, 16]
