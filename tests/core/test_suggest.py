"""suggest_convbp_input_tile_shapes returns tiles that pass every NPU rule, on many shapes."""

import operator

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import pypto
from pypto.pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info
from support.strategies import NOT_SET, RULE_IDS, invalid_cases, valid_cases


@st.composite
def problems(draw):
    kh, kw = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    sh, sw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dh, dw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    ph = draw(st.integers(0, (kh - 1) * dh))
    pw = draw(st.integers(0, (kw - 1) * dw))
    dy = [
        draw(st.integers(1, 8)),
        draw(st.integers(1, 600)),
        draw(st.integers(1, 80)),
        draw(st.integers(1, 80)),
    ]
    w = [dy[1], draw(st.integers(1, 600)), kh, kw]
    try:
        (hlo, hhi), (wlo, whi) = pypto.conv_backward_input_size_range(
            dy, w, [sh, sw], [ph, ph, pw, pw], [dh, dw]
        )
    except pypto.error.ConvBpInputError:  # large padding on a 1-pixel output: no valid size
        assume(False)
    size = [dy[0], w[1], draw(st.integers(hlo, hhi)), draw(st.integers(wlo, whi))]
    dtype = draw(st.sampled_from([pypto.DT_FP16, pypto.DT_BF16]))
    return dy, w, size, dtype, [sh, sw], [ph, ph, pw, pw], [dh, dw]


@settings(max_examples=150, deadline=None)
@given(problems())
def test_suggested_tiles_pass_the_op_rules(problem):
    dy, w, size, dtype, strides, paddings, dilations = problem
    l1, l0 = pypto.suggest_convbp_input_tile_shapes(
        dy, w, size, dtype, strides, paddings, dilations
    )
    assert isinstance(l1, ConvBpTileL1Info) and isinstance(l0, ConvBpTileL0Info)
    with pypto.options(convbp_tile_shapes=(l1, l0), vec_tile_shapes=[16, 16, 16, 16]):
        out = pypto.conv_backward_input(
            pypto.Tensor(dy, dtype),
            size,
            pypto.Tensor(w, dtype),
            dtype,
            strides,
            paddings,
            dilations,
        )
    assert out.shape == size


def test_no_legal_tiles_is_a_clear_error():
    # TS6: even 16 channels of a 33x33 kernel need more than the 512 KiB L1 buffer
    with pytest.raises(pypto.error.ConvBpInputError) as err:
        pypto.suggest_convbp_input_tile_shapes(
            [1, 16, 1, 1],
            [16, 16, 33, 33],
            [1, 16, 33, 33],
            pypto.DT_FP16,
            [1, 1],
            [0, 0, 0, 0],
            [1, 1],
        )
    assert err.value.rule == "TS6"


def test_bad_arguments_are_pypto_errors():
    with pytest.raises(pypto.PyptoError):
        pypto.suggest_convbp_input_tile_shapes(
            [1, 16, 5], [16, 16, 3, 3], [1, 16, 5, 32], pypto.DT_FP16, [1, 1], [1, 1, 1, 1], [1, 1]
        )
    with pytest.raises(pypto.PyptoError):
        pypto.suggest_convbp_input_tile_shapes(
            [1, 16, 5, 32], [16, 16, 3, 3], [1, 16, 5, 32], "fp16", [1, 1], [1, 1, 1, 1], [1, 1]
        )


@pytest.mark.parametrize(
    "size, rule",
    [
        ([1, 16, "a", 32], "T1"),
        ([1, 16, 5], "R1"),
        (7, "T1"),
        ([1, 16, 5.5, 32], "T1"),
        ([1, 16, 0, 32], "S1"),
        ([1, 16, -5, 32], "S1"),
        ([2, 16, 5, 32], "C1"),
        ([1, 16, 9, 32], "O1"),
    ],
)
def test_junk_input_size_is_the_ops_own_error(size, rule):
    for fn in (
        pypto.suggest_convbp_input_tile_shapes,
        lambda *a: pypto.explain_convbp_input_tiling(
            *a,
            pypto.pypto_impl.ConvBpTileL1Info(16, 144, 16),
            pypto.pypto_impl.ConvBpTileL0Info(16, 16, 16),
        ),
    ):
        with pytest.raises(pypto.error.ConvBpInputError) as err:
            fn([1, 16, 5, 32], [16, 16, 3, 3], size, pypto.DT_FP16, [1, 1], [1, 1, 1, 1], [1, 1])
        assert err.value.rule == rule


# --- the helpers agree with the op ----------------------------------------------------------------
# suggest, explain and the size range judge a problem by the op's own rules: on any case (valid,
# or broken so that one rule fails first) they raise the rule the op raises, or accept what it
# accepts. Rules they cannot meet are left out: non-Tensor grad_output/weight (T1 by type),
# per-tensor dtypes (D2-D4: the helpers take one dtype) and groups (G1: no such argument).
_NOT_EXPRESSIBLE = ("D2", "D3", "D4", "G1")
PROBLEM_RULES = RULE_IDS[: RULE_IDS.index("TS0")]


def _ops_verdict(case):
    """The rule the op (shape-only tensors, legal tiles set) reports first, or None."""
    case = case.copy()
    case.l1, case.l0, case.vec = (16, 16, 16), (16, 16, 16), (16, 16, 16, 16)
    try:
        case.run()
    except pypto.error.ConvBpInputError as exc:
        return exc.rule if exc.rule in PROBLEM_RULES else None  # tile rules: not the helpers'
    return None


def _expressible(case):
    """The helpers have no groups, tensor or per-tensor dtype arguments."""
    try:
        groups_ok = not isinstance(case.groups, bool) and operator.index(case.groups) == 1
    except TypeError:
        groups_ok = False
    return (
        groups_ok
        and case.rule not in _NOT_EXPRESSIBLE
        and case.grad_output is NOT_SET
        and case.weight is NOT_SET
        and case.out_dtype is case.go_dtype
        and case.w_dtype is case.go_dtype
    )


def _helper_args(case):
    return (
        case.go_shape,
        case.w_shape,
        case.input_size,
        case.go_dtype,
        case.strides,
        case.paddings,
        case.dilations,
    )


@settings(max_examples=300, deadline=None)
@given(st.one_of(valid_cases(), invalid_cases()))
def test_suggest_and_explain_refuse_exactly_what_the_op_refuses(case):
    assume(_expressible(case))
    pypto.reset_options()
    rule = _ops_verdict(case)
    for helper in (
        pypto.suggest_convbp_input_tile_shapes,
        lambda *a: pypto.explain_convbp_input_tiling(
            *a, ConvBpTileL1Info(16, 16, 16), ConvBpTileL0Info(16, 16, 16), [16, 16, 16, 16]
        ),
    ):
        try:
            helper(*_helper_args(case))
            got = None
        except pypto.error.ConvBpInputError as exc:
            # suggest: no legal tiles at all is a tile rule, not the problem's
            got = exc.rule if exc.rule in PROBLEM_RULES else None
        assert got == rule, (case, got, rule)


@settings(max_examples=300, deadline=None)
@given(st.one_of(valid_cases(), invalid_cases()))
def test_size_range_agrees_with_the_op(case):
    """A range given back is accepted by the op at both ends; a refusal is the op's rule for
    the same shapes (with an input size that passes S1 and C1)."""
    assume(_expressible(case) and case.rule != "D1")
    pypto.reset_options()
    try:
        ranges = pypto.conv_backward_input_size_range(
            case.go_shape, case.w_shape, case.strides, case.paddings, case.dilations
        )
    except pypto.error.ConvBpInputError as exc:
        probe = case.copy()
        probe.input_size = (
            [
                case.go_shape[0] if case.go_shape else 1,
                case.w_shape[1] if len(case.w_shape) > 1 else 1,
                1,
                1,
            ]
            if isinstance(case.go_shape, list) and isinstance(case.w_shape, list)
            else [1, 1, 1, 1]
        )
        probe.go_dtype = probe.w_dtype = probe.out_dtype = pypto.DT_FP16
        assert _ops_verdict(probe) == exc.rule, (case, exc.rule)
        return
    (hlo, hhi), (wlo, whi) = ranges
    for h, w in ((hlo, wlo), (hhi, whi)):
        probe = case.copy()
        probe.input_size = [int(case.go_shape[0]), int(case.w_shape[1]), h, w]
        probe.go_dtype = probe.w_dtype = probe.out_dtype = pypto.DT_FP16
        assert _ops_verdict(probe) is None, (case, h, w)
