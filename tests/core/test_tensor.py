"""DataType and pypto.Tensor, the public API's data types (specification section 2)."""

import numpy as np
import pytest

import pypto
from pypto.pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info

FP16, BF16 = pypto.DT_FP16, pypto.DT_BF16
VEC = [16, 16, 16, 16]


def l1(m=16, k=144, n=16):
    return ConvBpTileL1Info(m, k, n)


def l0(m=16, k=16, n=16):
    return ConvBpTileL0Info(m, k, n)


def small_conv():
    """A legal shape-only call (upstream fp16 UT case); needs tiles and vec tiles."""
    go = pypto.Tensor([1, 16, 16, 16], FP16)
    w = pypto.Tensor([16, 16, 3, 3], FP16)
    return pypto.conv_backward_input(go, [1, 16, 16, 16], w, FP16, [1, 1], [1, 1, 1, 1], [1, 1])


# ------------------------------------------------------------------------------------------------
# DataType
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, value",
    [
        ("DT_INT4", 0),
        ("DT_INT8", 1),
        ("DT_INT16", 2),
        ("DT_INT32", 3),
        ("DT_INT64", 4),
        ("DT_FP8", 5),
        ("DT_FP16", 6),
        ("DT_FP32", 7),
        ("DT_BF16", 8),
        ("DT_BOOL", 15),
        ("DT_DOUBLE", 16),
    ],
)
def test_datatype_values(name, value):
    member = getattr(pypto, name)
    assert member is pypto.DataType[name]
    assert int(member) == value
    assert pypto.DataType(value) is member


def test_datatype_repr_and_str():
    assert repr(pypto.DT_FP16) == "DataType.DT_FP16"
    assert str(pypto.DT_FP16) == "DataType.DT_FP16"
    assert str(pypto.DT_BF16) == "DataType.DT_BF16"
    assert f"{pypto.DT_INT8}" == "DataType.DT_INT8"
    assert pypto.pypto_impl.DataType is pypto.DataType


# ------------------------------------------------------------------------------------------------
# Tensor
# ------------------------------------------------------------------------------------------------
def test_tensor_alias():
    assert pypto.tensor is pypto.Tensor


def test_tensor_properties():
    t = pypto.Tensor((1, 16, 7, 5), FP16, "dy")
    assert type(t.shape) is list
    assert t.shape == [1, 16, 7, 5]
    assert t.dim == 4
    assert t.dtype is FP16
    assert t.name == "dy"
    t.name = "grad_output"
    assert t.name == "grad_output"
    shape = t.shape
    shape[0] = 99
    assert t.shape == [1, 16, 7, 5]  # .shape is a copy


def test_tensor_defaults():
    t = pypto.Tensor([2, 3])
    assert t.dtype is pypto.DT_FP32
    assert t.name == ""
    assert pypto.Tensor([]).dim == 0


def test_tensor_shape_accepts_numpy_ints():
    t = pypto.Tensor((np.int64(1), np.int32(16), np.uint8(7), 5), BF16)
    assert t.shape == [1, 16, 7, 5]
    assert all(type(v) is int for v in t.shape)


@pytest.mark.parametrize(
    "shape, dtype",
    [
        ([[1, 2]], FP16),
        ([1.0, 2], FP16),
        ([True, 2], FP16),
        ("12", FP16),
        (3, FP16),
        ([1, 2], "fp16"),
        ([1, 2], np.float16),
    ],
)
def test_tensor_junk_raises_pypto_error(shape, dtype):
    with pytest.raises(pypto.PyptoError):
        pypto.Tensor(shape, dtype)


def test_tensor_name_must_be_a_string():
    t = pypto.Tensor([1], FP16)
    with pytest.raises(pypto.PyptoError):
        t.name = 3


@pytest.mark.parametrize("other", [3, None, "x", np.zeros((1, 16, 16, 16), np.float16)])
def test_tensor_move_rejects_non_tensor(other):
    t = pypto.Tensor([1, 16, 16, 16], FP16)
    with pytest.raises(pypto.PyptoError) as e:
        t.move(other)
    assert "type cannot be moved to Tensor" in str(e.value)
    assert str(e.value) == (
        f"ErrCode: F00001, TypeError: '{type(other).__name__}' type cannot be moved to Tensor"
    )


def test_tensor_move_binds_a_result():
    pypto.set_convbp_input_tile_shapes(l1(), l0())
    pypto.set_vec_tile_shapes(*VEC)
    out = pypto.Tensor([1], FP16, "out")
    out.move(small_conv())
    assert out.shape == [1, 16, 16, 16]
    assert out.dtype is FP16
    assert out.name == "out"


def test_op_result_is_a_pypto_tensor():
    pypto.set_convbp_input_tile_shapes(l1(), l0())
    pypto.set_vec_tile_shapes(*VEC)
    result = small_conv()
    assert isinstance(result, pypto.tensor)
    assert result.shape == [1, 16, 16, 16]
