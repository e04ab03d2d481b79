"""NumPy and PyTorch interop: zero copy where promised (checked by memory address), round trips,
bfloat16 across libraries, results written into the caller's tensors in place."""

import ml_dtypes
import numpy as np
import pytest

import pypto

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_from_numpy_shares_memory_and_numpy_gives_it_back():
    a = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
    t = pypto.from_numpy(a, "x")
    assert t.numpy() is a and t.shape == [2, 3, 4] and t.dtype == pypto.DT_FP16 and t.name == "x"
    b = np.zeros(4, BF16)
    assert pypto.from_numpy(b).numpy().ctypes.data == b.ctypes.data
    assert pypto.from_numpy(b).dtype == pypto.DT_BF16


def test_dlpack_out_is_zero_copy():
    a = np.arange(12, dtype=np.float16).reshape(3, 4)
    back = np.from_dlpack(pypto.from_numpy(a))
    assert back.ctypes.data == a.ctypes.data and np.array_equal(back, a)


def test_unsupported_dtypes_are_refused_clearly():
    with pytest.raises(pypto.PyptoError, match="dtype complex64 have no pypto DataType"):
        pypto.from_numpy(np.zeros(3, np.complex64))
    with pytest.raises(pypto.PyptoError, match="expects a numpy.ndarray"):
        pypto.from_numpy([1, 2, 3])


def test_torch_round_trips_zero_copy_bf16_included():
    torch = pytest.importorskip("torch")
    for dtype in (torch.float16, torch.bfloat16):
        t = torch.arange(8, dtype=dtype).reshape(2, 4)
        p = pypto.from_torch(t)
        assert p.numpy().ctypes.data == t.data_ptr()          # in: shared
        back = torch.from_dlpack(p)                            # out: shared
        assert back.data_ptr() == t.data_ptr() and back.dtype == dtype
        assert torch.equal(back, t)
    assert pypto.from_torch(torch.zeros(2, dtype=torch.bfloat16)).numpy().dtype == BF16


def test_torch_non_contiguous_and_requires_grad():
    torch = pytest.importorskip("torch")
    t = torch.arange(16, dtype=torch.float16).reshape(4, 4).t()   # a transposed view
    p = pypto.from_torch(t)
    assert p.numpy().ctypes.data == t.data_ptr() and np.array_equal(p.numpy(), t.numpy())
    g = torch.ones(3, dtype=torch.float16, requires_grad=True)
    assert pypto.from_torch(g).numpy().ctypes.data == g.data_ptr()


def test_jit_writes_into_torch_tensors_in_place():
    torch = pytest.importorskip("torch")
    from pypto import pypto_impl

    @pypto.jit
    def kernel(dy: pypto.Tensor((1, 16, 4, 4), pypto.DT_BF16),
               w: pypto.Tensor((16, 16, 1, 1), pypto.DT_BF16),
               dx: pypto.Tensor((1, 16, 4, 4), pypto.DT_BF16)):
        pypto.set_convbp_input_tile_shapes(pypto_impl.ConvBpTileL1Info(16, 16, 16),
                                           pypto_impl.ConvBpTileL0Info(16, 16, 16))
        pypto.set_vec_tile_shapes(16, 16, 16, 16)
        dx.move(pypto.conv_backward_input(dy, [1, 16, 4, 4], w, pypto.DT_BF16, [1, 1],
                                          [0, 0, 0, 0], [1, 1]))

    dy = torch.randn(1, 16, 4, 4).to(torch.bfloat16)
    w = torch.eye(16).reshape(16, 16, 1, 1).to(torch.bfloat16)   # identity: dx == dy
    out = torch.zeros(1, 16, 4, 4, dtype=torch.bfloat16)
    address = out.data_ptr()
    kernel(dy, w, out)
    assert out.data_ptr() == address and torch.equal(out, dy)
