"""pypto.Tensor: a shape-only description (upstream's graph mode) or a view of host data.

``Tensor(shape, dtype)`` describes a tensor; the op then validates and returns a shape-only
result. ``from_numpy`` / ``from_torch`` wrap host data without copying where the dtype allows,
and the op computes eagerly. ``out.move(result)`` binds a result into ``out``: when ``out`` wraps
a caller's array, the values are written into that array in place.
"""

import numpy as np

from ._core.values import as_int
from ._dtypes import DataType, TileOpFormat, from_numpy_dtype, numpy_dtype
from .error import FeError, argument_errors_are_pypto_errors

__all__ = ["Tensor", "tensor", "from_numpy", "from_torch"]


def _shape_list(shape):
    if not isinstance(shape, (list, tuple)):
        raise FeError(
            TypeError(f"Tensor shape must be a list or tuple of ints, but got {shape!r}.")
        )
    dims = [as_int(v) for v in shape]
    if None in dims:
        v = shape[dims.index(None)]
        raise FeError(
            TypeError(f"Tensor shape must hold ints, but got {v!r} of type {type(v).__name__}.")
        )
    return dims


class Tensor:
    """A pypto tensor (upstream ``pypto.Tensor``, also ``pypto.tensor``).

    Parameters
    ----------
    shape : list or tuple of int
        Dimensions; -1 marks a dynamic dimension (which conv_backward_input refuses).
    dtype : DataType, default DT_FP32
    name : str
    format : TileOpFormat, default TILEOP_ND
    data_ptr, device, ori_shape
        Accepted for upstream compatibility; host data is attached with :func:`from_numpy`.
    """

    def __init__(
        self,
        shape=None,
        dtype=None,
        name="",
        format=None,
        data_ptr=None,
        device=None,
        ori_shape=None,
    ):
        self._shape = _shape_list([] if shape is None else shape)
        dtype = DataType.DT_FP32 if dtype is None else dtype
        if not isinstance(dtype, DataType):
            raise FeError(TypeError(f"Tensor dtype must be a DataType, but got {dtype!r}."))
        self._dtype = dtype
        self.name = name
        if format is not None and not isinstance(format, TileOpFormat):
            raise FeError(TypeError(f"Tensor format must be a TileOpFormat, but got {format!r}."))
        self._format = TileOpFormat.TILEOP_ND if format is None else format
        self._ori_shape = list(self._shape) if ori_shape is None else _shape_list(ori_shape)
        self.device = device
        self._data = None

    # --- upstream properties ----------------------------------------------------------------
    @property
    def shape(self):
        return list(self._shape)

    @property
    def dtype(self):
        return self._dtype

    @property
    def dim(self):
        return len(self._shape)

    @property
    def format(self):
        return self._format

    @property
    def ori_shape(self):
        return list(self._ori_shape)

    @property
    def name(self):
        return self._name

    @name.setter
    def name(self, value):
        if not isinstance(value, str):
            raise FeError(TypeError(f"Tensor name must be a str, but got {type(value).__name__}."))
        self._name = value

    def __class_getitem__(cls, params):
        """``pypto.Tensor[shape, dtype]``: an annotation, the same as
        ``pypto.Tensor(shape, dtype)``."""
        if not isinstance(params, tuple):
            params = (params,)
        return cls(*params)

    # --- host data --------------------------------------------------------------------------
    @property
    def has_data(self):
        """True when the tensor holds host data (not only a shape)."""
        return self._data is not None

    def numpy(self):
        """The host data as a NumPy array (a view, not a copy).

        bf16 data comes back as an ``ml_dtypes.bfloat16`` array.
        """
        if self._data is None:
            raise FeError(
                RuntimeError(
                    f"Tensor '{self.name}' {self.shape} holds no data: it only "
                    "describes a shape. Use pypto.from_numpy to attach data."
                )
            )
        data = self._data
        # NumPy lets the caller change an array's shape or dtype in place (``a.shape = ...``)
        # after wrapping: the tensor's shape is what was validated, so the two must agree
        if data.shape != tuple(self._shape) or from_numpy_dtype(data.dtype) != self._dtype:
            raise FeError(
                RuntimeError(
                    f"Tensor '{self.name}' is {self._dtype} {self.shape}, but the array it wraps "
                    f"is now {data.dtype} {list(data.shape)}: it was changed in place after "
                    "wrapping. Wrap it again with pypto.from_numpy."
                )
            )
        return data

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export the host data through DLPack (zero copy), e.g. ``torch.from_dlpack(t)``.

        The keywords are the protocol's (array API 2023.12). fp16 and other NumPy dtypes go out
        through NumPy's exporter, with its rules. NumPy's DLPack has no bfloat16, so bf16 data
        goes out through torch's (when installed) as a torch.bfloat16 view of the same memory;
        a read-only array is exported as a copy (never as a writable view of it), or refused
        with ``copy=False``. ``np.from_dlpack`` cannot import bfloat16: use ``np.asarray(t)``.
        """
        array = self.numpy()
        if self._dtype != DataType.DT_BF16:
            kwargs = {
                k: v
                for k, v in (
                    ("stream", stream),
                    ("max_version", max_version),
                    ("dl_device", dl_device),
                    ("copy", copy),
                )
                if v is not None
            }
            return array.__dlpack__(**kwargs)
        try:
            import torch
        except ImportError:
            raise FeError(
                RuntimeError(
                    "exporting bfloat16 through DLPack needs PyTorch "
                    "(NumPy's DLPack has no bfloat16)"
                )
            ) from None
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"the data is on the CPU, not on DLPack device {tuple(dl_device)}")
        if not array.flags.writeable or copy:
            if copy is False:
                raise BufferError(
                    "the array is read-only and copy=False: a DLPack export "
                    "would let the consumer write into it"
                )
            array = array.copy()
        exported = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        return (
            exported.__dlpack__()
            if max_version is None
            else exported.__dlpack__(max_version=max_version)
        )

    def __array__(self, dtype=None, copy=None):
        """``np.asarray(t)``: the host data (bf16 as ``ml_dtypes.bfloat16``), no copy unless
        ``dtype`` or ``copy=True`` asks for one."""
        array = self.numpy()
        if dtype is not None and np.dtype(dtype) != array.dtype:
            if copy is False:
                raise ValueError(f"converting {array.dtype} to {np.dtype(dtype)} needs a copy")
            return array.astype(dtype)
        return array.copy() if copy else array

    def __dlpack_device__(self):
        return self.numpy().__dlpack_device__()

    def move(self, other):
        """Bind ``other``'s result to this tensor.

        If this tensor wraps a caller's array, ``other``'s values are copied into it in place
        (shapes and dtypes must match); otherwise this tensor takes ``other``'s shape and data.
        """
        if not isinstance(other, Tensor):
            raise FeError(TypeError(f"'{type(other).__name__}' type cannot be moved to Tensor"))
        if self._data is not None and other._data is None:
            raise FeError(
                ValueError(
                    f"cannot move the shape-only tensor '{other.name}' {other.shape} into tensor "
                    f"'{self.name}', which wraps an array: it holds no values to write (an op "
                    "given shape-only inputs returns a shape-only result)"
                )
            )
        if self._data is not None:
            if other.shape != self.shape or other.dtype != self.dtype:
                raise FeError(
                    ValueError(
                        f"cannot move a {other.dtype} tensor of shape {other.shape} into the "
                        f"{self.dtype} tensor '{self.name}' of shape {self.shape}"
                    )
                )
            target = self.numpy()  # checks the array was not reshaped since it was wrapped
            if not target.flags.writeable:
                raise FeError(
                    ValueError(f"cannot move into tensor '{self.name}': its array is read-only")
                )
            # "equiv": same type in any byte order (a big-endian caller array is fine)
            np.copyto(target, other.numpy(), casting="equiv")
            return
        self._shape, self._dtype = other.shape, other.dtype
        self._ori_shape = other.ori_shape
        self._data = other._data

    def __repr__(self):
        kind = "data" if self._data is not None else "shape only"
        return f"Tensor(shape={self.shape}, dtype={self.dtype}, name={self.name!r}, {kind})"

    @classmethod
    def _wrap(cls, array, name="", dtype=None):
        """A Tensor around ``array`` (no copy); ``dtype`` skips the lookup when known."""
        out = cls.__new__(cls)  # fields set directly: the array already says all they hold
        out._shape = list(array.shape)
        out._ori_shape = list(out._shape)
        out._dtype = from_numpy_dtype(array.dtype) if dtype is None else dtype
        out._name = name
        out._format = TileOpFormat.TILEOP_ND
        out.device = None
        out._data = array
        return out


tensor = Tensor


@argument_errors_are_pypto_errors
def from_numpy(array, name=""):
    """Wrap a NumPy array as a Tensor, without copying.

    float16 -> DT_FP16, ``ml_dtypes.bfloat16`` -> DT_BF16, float32 -> DT_FP32, float64 ->
    DT_DOUBLE, integer and bool types to their DataType. Other dtypes (complex, object, strings,
    other ml_dtypes types) raise a PyptoError. Views of any layout are kept as given; the op
    copies what it needs into the layout its kernel reads.
    """
    if not isinstance(array, np.ndarray):
        raise FeError(
            TypeError(f"from_numpy expects a numpy.ndarray, but got {type(array).__name__}.")
        )
    if isinstance(array, np.ma.MaskedArray):  # the op would read the masked values as data
        raise FeError(
            TypeError(
                "from_numpy: a masked array's mask would be ignored; pass "
                "array.filled(value) or array.data"
            )
        )
    if from_numpy_dtype(array.dtype) is None:
        raise FeError(
            TypeError(
                f"from_numpy: arrays of dtype {array.dtype} have no pypto "
                "DataType (use float16, bfloat16, float32, float64, ints or bool)."
            )
        )
    return Tensor._wrap(array, name)


@argument_errors_are_pypto_errors
def from_torch(tensor_, name=""):
    """Wrap a CPU ``torch.Tensor`` as a pypto Tensor, sharing its memory.

    torch.bfloat16 is viewed as ``ml_dtypes.bfloat16`` (same bits, no copy). A tensor that
    requires grad is detached first (the data is shared, the graph is not).
    """
    try:
        import torch
    except ImportError:  # torch is optional
        raise FeError(RuntimeError("from_torch needs PyTorch, which is not installed.")) from None
    if not isinstance(tensor_, torch.Tensor):
        raise FeError(
            TypeError(f"from_torch expects a torch.Tensor, but got {type(tensor_).__name__}.")
        )
    if tensor_.device.type != "cpu":
        raise FeError(
            ValueError(
                f"from_torch: tensor is on {tensor_.device}; pass a CPU tensor "
                "(.cpu()) to the CPU backend."
            )
        )
    t = tensor_.detach()
    # views whose memory does not hold their values (lazy negation or conjugation), nested
    # tensors and other layouts have no NumPy view to share
    if t.is_nested or t.layout != torch.strided:
        raise FeError(
            TypeError(
                f"from_torch: a {'nested' if t.is_nested else str(t.layout)} "
                "tensor has no dense memory to share; pass a dense tensor"
            )
        )
    if t.is_neg() or t.is_conj():
        raise FeError(
            ValueError(
                "from_torch: the tensor has its lazy negation (or conjugation) "
                "bit set, so its memory does not hold its values; call "
                ".resolve_neg() / .resolve_conj() first"
            )
        )
    if t.dtype == torch.bfloat16:
        array = t.view(torch.int16).numpy().view(numpy_dtype(DataType.DT_BF16))
    else:
        try:
            array = t.numpy()
        except (TypeError, RuntimeError) as exc:
            raise FeError(TypeError(f"from_torch: cannot wrap a {t.dtype} tensor: {exc}")) from None
    return from_numpy(array, name)
