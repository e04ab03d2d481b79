"""explain_convbp_input_tiling agrees with the op's own rules and reports the right numbers."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pypto
from pypto.pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info

SPEC = ([1, 16, 5, 32], [16, 16, 3, 3], [1, 16, 5, 32], pypto.DT_FP16, [1, 1], [1, 1, 1, 1], [1, 1])


def _op_verdict(l1, l0, vec):
    """The first rule the op itself reports for these tiles, or None."""
    dy, w, size, dtype, s, p, d = SPEC
    with pypto.options(convbp_tile_shapes=(l1, l0), vec_tile_shapes=vec):
        try:
            pypto.conv_backward_input(
                pypto.Tensor(dy, dtype), size, pypto.Tensor(w, dtype), dtype, s, p, d
            )
        except pypto.error.ConvBpInputError as err:
            return err.rule
    return None


def test_spec_example_numbers():
    report = pypto.explain_convbp_input_tiling(
        *SPEC,
        ConvBpTileL1Info(16, 144, 16),
        ConvBpTileL0Info(16, 16, 16),
        vec_tile_shapes=[16, 16, 16, 16],
    )
    assert report.legal and report.suggestion is None
    # L1: (tileKL1*tileNL1 + houtL1*woutL1*coutL1) * 2 = (144*16 + 3*18*16) * 2
    assert report.buffers["L1"] == ((144 * 16 + 3 * 18 * 16) * 2, 524288)
    assert report.buffers["L0A"] == (16 * 16 * 2, 65536)
    assert report.buffers["L0C"] == (16 * 16 * 4, 131072)
    assert report.loops["L0 iterations (N x M x K at L0)"] == 1 * 10 * 9
    assert "verdict: legal" in str(report)


def test_too_many_l0_loops_warns():
    report = pypto.explain_convbp_input_tiling(
        [1, 256, 64, 64],
        [256, 256, 3, 3],
        [1, 256, 64, 64],
        pypto.DT_FP16,
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        ConvBpTileL1Info(64, 2304, 16),
        ConvBpTileL0Info(16, 16, 16),
        vec_tile_shapes=[16, 16, 16, 16],
    )
    assert report.warnings and "5000" in report.warnings[0]


tile_values = st.sampled_from([0, 8, 16, 24, 32, 48, 64, 96, 144, 288, 300, 4096])


@settings(max_examples=120, deadline=None)
@given(
    st.tuples(tile_values, tile_values, tile_values),
    st.tuples(tile_values, tile_values, tile_values),
    st.sampled_from([[16, 16, 16, 16], [16, 16, 1, 16, 16], [16, 16, 8], [16, 16, 16, 8]]),
)
def test_report_agrees_with_the_op(l1_values, l0_values, vec):
    l1, l0 = ConvBpTileL1Info(*l1_values), ConvBpTileL0Info(*l0_values)
    report = pypto.explain_convbp_input_tiling(*SPEC, l1, l0, vec_tile_shapes=vec)
    failing = [rule for rule, passed, _, _ in report.rules if not passed]
    op_rule = _op_verdict(l1, l0, vec)
    if not any(l1_values + l0_values):
        assert op_rule == "TS0"  # all zero means "not set" to the op
        return
    assert (op_rule is None) == report.legal
    if op_rule is not None:
        assert failing[0] == op_rule
        suggested = report.suggestion
        assert suggested is not None
        assert _op_verdict(*suggested, [16, 16, 16, 16]) is None  # the suggestion is legal


def test_bad_arguments():
    with pytest.raises(pypto.PyptoError):
        pypto.explain_convbp_input_tiling(*SPEC, (16, 144, 16), ConvBpTileL0Info(16, 16, 16))


# --- tile values of odd types: explain refuses (or judges) them as the op does -----------------
ODD_TILE_VALUES = [
    16.0,
    16.5,
    "16",
    "a",
    None,
    True,
    np.int64(16),
    np.uint64(2**63),
    np.float32(16),
    2**63,
    -16,
    [16],
]


def _op_outcome(l1, l0, vec):
    """The op's PyptoError as (type, rule), or None when it accepts the tiles."""
    dy, w, size, dtype, s, p, d = SPEC
    try:
        with pypto.options(convbp_tile_shapes=(l1, l0), vec_tile_shapes=vec):
            pypto.conv_backward_input(
                pypto.Tensor(dy, dtype), size, pypto.Tensor(w, dtype), dtype, s, p, d
            )
    except pypto.PyptoError as err:
        return type(err), getattr(err, "rule", None)
    return None


@pytest.mark.parametrize(
    "where",
    range(10),
    ids=[
        "tileML1",
        "tileKL1",
        "tileNL1",
        "tileML0",
        "tileKL0",
        "tileNL0",
        "vec0",
        "vec1",
        "vec2",
        "vec3",
    ],
)
@pytest.mark.parametrize("value", ODD_TILE_VALUES, ids=repr)
def test_odd_tile_values_are_judged_as_the_op_judges_them(where, value):
    values = [16, 144, 16, 16, 16, 16, 16, 16, 16, 16]
    values[where] = value
    l1, l0, vec = ConvBpTileL1Info(*values[:3]), ConvBpTileL0Info(*values[3:6]), values[6:]
    op = _op_outcome(l1, l0, vec)
    try:  # anything but a PyptoError fails the test here
        report = pypto.explain_convbp_input_tiling(*SPEC, l1, l0, vec_tile_shapes=vec)
    except pypto.PyptoError as err:
        assert op is not None and op[1] in (None, "TS0"), op  # the op refuses it before TS1
        assert (type(err), getattr(err, "rule", None)) == op
        return
    failing = [rule for rule, passed, _, _ in report.rules if not passed]
    assert (failing[0] if failing else None) == (op and op[1])
    str(report)  # the numbers print


def test_report_rows_follow_the_ops_order_and_name_their_source():
    from pypto._core.rules import PYPTO_ONLY, TILE_CHECKS, VEC_CHECKS

    report = pypto.explain_convbp_input_tiling(
        *SPEC, ConvBpTileL1Info(17, 16, 24), ConvBpTileL0Info(16, 16, 16), [16, 16, 16, 16]
    )
    # upstream's order (f121cb47): tileNL1, tileKL1 % 16, tileML1, tileKL1 % (16 * Kh * Kw)
    assert [row[0] for row in report.rules] == [
        "TS2",
        "TS3",
        "TS1",
        "TS3",
        "TS4",
        "TS5",
        "TS6",
        "V1",
    ]
    assert [row[0] for row in report.rules if not row[1]] == ["TS2", "TS3"]
    l1, l0 = ConvBpTileL1Info(17, 16, 24), ConvBpTileL0Info(16, 16, 16)
    assert _op_verdict(l1, l0, [16, 16, 16, 16]) == "TS2"
    assert report.sources == [entry.source for entry in TILE_CHECKS + VEC_CHECKS]
    text = str(report)
    assert "tileKL1(16) should be divisible by Cout0 * Hk * Wk  [upstream af796792]" in text
    assert f"[{PYPTO_ONLY}" in text and "[upstream 8815cf8f" in text
