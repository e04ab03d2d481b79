"""suggest_convbp_input_tile_shapes returns tiles that pass every NPU rule, on many shapes."""

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import pypto
from pypto.pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info


@st.composite
def problems(draw):
    kh, kw = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    sh, sw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dh, dw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    ph = draw(st.integers(0, (kh - 1) * dh))
    pw = draw(st.integers(0, (kw - 1) * dw))
    dy = [draw(st.integers(1, 8)), draw(st.integers(1, 600)), draw(st.integers(1, 80)),
          draw(st.integers(1, 80))]
    w = [dy[1], draw(st.integers(1, 600)), kh, kw]
    try:
        (hlo, hhi), (wlo, whi) = pypto.conv_backward_input_size_range(
            dy, w, [sh, sw], [ph, ph, pw, pw], [dh, dw])
    except pypto.error.ConvBpInputError:  # large padding on a 1-pixel output: no valid size
        assume(False)
    size = [dy[0], w[1], draw(st.integers(hlo, hhi)), draw(st.integers(wlo, whi))]
    dtype = draw(st.sampled_from([pypto.DT_FP16, pypto.DT_BF16]))
    return dy, w, size, dtype, [sh, sw], [ph, ph, pw, pw], [dh, dw]


@settings(max_examples=150, deadline=None)
@given(problems())
def test_suggested_tiles_pass_the_op_rules(problem):
    dy, w, size, dtype, strides, paddings, dilations = problem
    l1, l0 = pypto.suggest_convbp_input_tile_shapes(dy, w, size, dtype, strides, paddings,
                                                    dilations)
    assert isinstance(l1, ConvBpTileL1Info) and isinstance(l0, ConvBpTileL0Info)
    with pypto.options(convbp_tile_shapes=(l1, l0), vec_tile_shapes=[16, 16, 16, 16]):
        out = pypto.conv_backward_input(pypto.Tensor(dy, dtype), size, pypto.Tensor(w, dtype),
                                        dtype, strides, paddings, dilations)
    assert out.shape == size


def test_no_legal_tiles_is_a_clear_error():
    # TS6: even 16 channels of a 33x33 kernel need more than the 512 KiB L1 buffer
    with pytest.raises(pypto.error.ConvBpInputError) as err:
        pypto.suggest_convbp_input_tile_shapes([1, 16, 1, 1], [16, 16, 33, 33], [1, 16, 33, 33],
                                               pypto.DT_FP16, [1, 1], [0, 0, 0, 0], [1, 1])
    assert err.value.rule == "TS6"


def test_bad_arguments_are_pypto_errors():
    with pytest.raises(pypto.PyptoError):
        pypto.suggest_convbp_input_tile_shapes([1, 16, 5], [16, 16, 3, 3], [1, 16, 5, 32],
                                               pypto.DT_FP16, [1, 1], [1, 1, 1, 1], [1, 1])
    with pytest.raises(pypto.PyptoError):
        pypto.suggest_convbp_input_tile_shapes([1, 16, 5, 32], [16, 16, 3, 3], [1, 16, 5, 32],
                                               "fp16", [1, 1], [1, 1, 1, 1], [1, 1])


@pytest.mark.parametrize("size", [[1, 16, "a", 32], [1, 16, 5], 7, [1, 16, 5.5, 32]])
def test_junk_input_size_is_a_pypto_error(size):
    for fn in (pypto.suggest_convbp_input_tile_shapes,
               lambda *a: pypto.explain_convbp_input_tiling(
                   *a, pypto.pypto_impl.ConvBpTileL1Info(16, 144, 16),
                   pypto.pypto_impl.ConvBpTileL0Info(16, 16, 16))):
        with pytest.raises(pypto.error.ConvBpInputError) as err:
            fn([1, 16, 5, 32], [16, 16, 3, 3], size, pypto.DT_FP16, [1, 1], [1, 1, 1, 1],
               [1, 1])
        assert err.value.rule == "T1"
