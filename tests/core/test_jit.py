"""pypto.jit kernels: annotations, argument checks and moving the result into the
caller's array (specification section 2).
"""

import re

import numpy as np
import pytest

import pypto
from pypto.pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info
from support.reference import dgrad_brute_force

FP16 = pypto.DT_FP16


def tile_values():
    a, b = pypto.get_convbp_input_tile_shapes()
    return (a.tileML1, a.tileKL1, a.tileNL1), (b.tileML0, b.tileKL0, b.tileNL0)


ZERO_TILES = ((0, 0, 0), (0, 0, 0))


# ------------------------------------------------------------------------------------------------
# jit
# ------------------------------------------------------------------------------------------------
def test_jit_alias():
    assert pypto.jit is pypto.frontend.jit


def test_jit_bare_and_with_options():
    @pypto.jit
    def bare(x):
        return x + 1

    @pypto.frontend.jit(debug_options={"runtime_debug_mode": 0, "compile_debug_mode": 0})
    def configured(x):
        return x * 2

    assert bare(1) == 2
    assert configured(3) == 6
    assert bare.__name__ == "bare"
    assert configured.options["debug_options"] == {"runtime_debug_mode": 0, "compile_debug_mode": 0}


def make_annotated_kernel():
    @pypto.jit
    def kernel(x: pypto.Tensor([2, 3], pypto.DT_FP32), y: pypto.Tensor([4], FP16)):
        return x.shape, y.dtype

    return kernel


def test_jit_accepts_matching_arrays():
    kernel = make_annotated_kernel()
    assert kernel(np.zeros((2, 3), np.float32), np.zeros(4, np.float16)) == ([2, 3], FP16)
    assert kernel(pypto.Tensor([2, 3]), pypto.Tensor([4], FP16)) == ([2, 3], FP16)


@pytest.mark.parametrize(
    "x, y, text",
    [
        (
            np.zeros((3, 2), np.float32),
            np.zeros(4, np.float16),
            "argument 'x' has shape [3, 2], but the kernel declares [2, 3]",
        ),
        (
            np.zeros((2, 3, 1), np.float32),
            np.zeros(4, np.float16),
            "argument 'x' has shape [2, 3, 1], but the kernel declares [2, 3]",
        ),
        (
            np.zeros((2, 3), np.float16),
            np.zeros(4, np.float16),
            "argument 'x' has dtype DataType.DT_FP16, but the kernel declares DataType.DT_FP32",
        ),
        (
            np.zeros((2, 3), np.float32),
            np.zeros(4, np.float32),
            "argument 'y' has dtype DataType.DT_FP32, but the kernel declares DataType.DT_FP16",
        ),
    ],
)
def test_jit_rejects_wrong_shape_or_dtype(x, y, text):
    kernel = make_annotated_kernel()
    with pytest.raises(pypto.PyptoError, match=re.escape(text)):
        kernel(x, y)


def test_jit_rejects_non_arrays_and_wrong_arity():
    kernel = make_annotated_kernel()
    with pytest.raises(pypto.PyptoError):
        kernel([[0, 0, 0], [0, 0, 0]], np.zeros(4, np.float16))
    with pytest.raises(pypto.PyptoError):
        kernel(np.zeros((2, 3), np.float32))


def test_jit_kernel_upstream_st_style_moves_result_into_the_callers_array():
    # test_convbp_2d_fp16_stride: 13x13 input, 3x3 kernel, stride 2, pad 1 -> dy 7x7
    shape_dy, shape_w, size = [1, 16, 7, 7], [16, 16, 3, 3], [1, 16, 13, 13]

    @pypto.frontend.jit(debug_options={"runtime_debug_mode": 0, "compile_debug_mode": 0})
    def conv_bp(
        grad_output: pypto.Tensor(shape_dy, FP16),
        weight: pypto.Tensor(shape_w, FP16),
        input_grad: pypto.Tensor(size, FP16),
    ):
        pypto.set_convbp_input_tile_shapes(
            ConvBpTileL1Info(13, 144, 16), ConvBpTileL0Info(16, 16, 16)
        )
        pypto.set_vec_tile_shapes(16, 16, 1, 16, 16)
        output = pypto.conv_backward_input(
            grad_output, size, weight, FP16, [2, 2], [1, 1, 1, 1], [1, 1], groups=1
        )
        input_grad.move(output)

    rng = np.random.default_rng(0)
    dy = rng.random(shape_dy).astype(np.float16)
    w = rng.random(shape_w).astype(np.float16)
    out = np.zeros(size, np.float16)
    conv_bp(dy, w, out)
    ref = dgrad_brute_force(dy, w, size[2:], [2, 2], [1, 1], [1, 1])
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=1e-2, atol=1e-2)
    assert np.count_nonzero(out) > 0
    assert tile_values() == ZERO_TILES  # the kernel's tiles stayed in its scope
