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
        assert p.numpy().ctypes.data == t.data_ptr()  # in: shared
        back = torch.from_dlpack(p)  # out: shared
        assert back.data_ptr() == t.data_ptr() and back.dtype == dtype
        assert torch.equal(back, t)
    assert pypto.from_torch(torch.zeros(2, dtype=torch.bfloat16)).numpy().dtype == BF16


def test_torch_non_contiguous_and_requires_grad():
    torch = pytest.importorskip("torch")
    t = torch.arange(16, dtype=torch.float16).reshape(4, 4).t()  # a transposed view
    p = pypto.from_torch(t)
    assert p.numpy().ctypes.data == t.data_ptr() and np.array_equal(p.numpy(), t.numpy())
    g = torch.ones(3, dtype=torch.float16, requires_grad=True)
    assert pypto.from_torch(g).numpy().ctypes.data == g.data_ptr()


def test_jit_writes_into_torch_tensors_in_place():
    torch = pytest.importorskip("torch")
    from pypto import pypto_impl

    @pypto.jit
    def kernel(
        dy: pypto.Tensor((1, 16, 4, 4), pypto.DT_BF16),
        w: pypto.Tensor((16, 16, 1, 1), pypto.DT_BF16),
        dx: pypto.Tensor((1, 16, 4, 4), pypto.DT_BF16),
    ):
        pypto.set_convbp_input_tile_shapes(
            pypto_impl.ConvBpTileL1Info(16, 16, 16), pypto_impl.ConvBpTileL0Info(16, 16, 16)
        )
        pypto.set_vec_tile_shapes(16, 16, 16, 16)
        dx.move(
            pypto.conv_backward_input(
                dy, [1, 16, 4, 4], w, pypto.DT_BF16, [1, 1], [0, 0, 0, 0], [1, 1]
            )
        )

    dy = torch.randn(1, 16, 4, 4).to(torch.bfloat16)
    w = torch.eye(16).reshape(16, 16, 1, 1).to(torch.bfloat16)  # identity: dx == dy
    out = torch.zeros(1, 16, 4, 4, dtype=torch.bfloat16)
    address = out.data_ptr()
    kernel(dy, w, out)
    assert out.data_ptr() == address and torch.equal(out, dy)


@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_numpy_asarray_gives_the_data_itself(dtype):
    a = np.arange(6, dtype=dtype).reshape(2, 3)
    t = pypto.from_numpy(a)
    assert np.asarray(t) is a
    assert np.asarray(t, dtype=np.float32).dtype == np.float32
    copied = np.array(t, copy=True)
    assert copied.ctypes.data != a.ctypes.data and np.array_equal(copied, a)
    with pytest.raises(ValueError):
        np.asarray(t, dtype=np.float32, copy=False)


def test_dlpack_of_a_read_only_fp16_array_is_read_only_or_refused():
    a = np.arange(4, dtype=np.float16)
    a.flags.writeable = False
    try:
        back = np.from_dlpack(pypto.from_numpy(a))
    except BufferError:
        return  # an older NumPy without the read-only flag of versioned DLPack
    assert not back.flags.writeable
    assert np.array_equal(np.from_dlpack(pypto.from_numpy(a), copy=True), a)


def test_dlpack_takes_the_protocols_keywords():
    a = np.arange(4, dtype=np.float16)
    t = pypto.from_numpy(a)
    capsule = t.__dlpack__(stream=None, max_version=(1, 0), dl_device=(1, 0), copy=None)
    assert capsule is not None
    assert t.__dlpack_device__() == (1, 0)


def test_bf16_dlpack_never_writes_through_a_read_only_array():
    torch = pytest.importorskip("torch")
    a = np.arange(4, dtype=BF16)
    a.flags.writeable = False
    t = pypto.from_numpy(a)
    exported = torch.from_dlpack(t)
    exported += 1  # a copy: the read-only array keeps its values
    assert np.array_equal(a.astype(np.float32), np.arange(4, dtype=np.float32))
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__(copy=False)
    writable = np.arange(4, dtype=BF16)
    shared = torch.from_dlpack(pypto.from_numpy(writable))
    assert shared.data_ptr() == writable.ctypes.data  # writable arrays stay zero copy
    assert torch.equal(
        torch.from_dlpack(pypto.from_numpy(writable).__dlpack__(max_version=(1, 0))), shared
    )


def test_torch_views_without_their_values_in_memory_are_refused():
    torch = pytest.importorskip("torch")
    x = torch.arange(4, dtype=torch.float16)
    with pytest.raises(pypto.PyptoError, match="lazy negation"):
        pypto.from_torch(x._neg_view())
    with pytest.raises(pypto.PyptoError, match="no dense memory to share"):
        pypto.from_torch(torch.ones(3, 3).to_sparse())
    with pytest.warns(UserWarning):  # torch says nested tensors are a prototype
        nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    with pytest.raises(pypto.PyptoError, match="nested tensor"):
        pypto.from_torch(nested)
