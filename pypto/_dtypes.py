"""DataType: upstream's enum of element types, and how each maps to a NumPy dtype."""

import enum
import functools

import numpy as np

__all__ = [
    "DataType",
    "TileOpFormat",
    "dtype_size",
    "numpy_dtype",
    "from_numpy_dtype",
    "DTYPE_NAMES",
    "dtype_name",
    "parse_dtype_name",
]


class DataType(enum.IntEnum):
    """Element types, with upstream PyPTO's integer values
    (``framework/include/tilefwk/data_type.h``)."""

    DT_INT4 = 0
    DT_INT8 = 1
    DT_INT16 = 2
    DT_INT32 = 3
    DT_INT64 = 4
    DT_FP8 = 5
    DT_FP16 = 6
    DT_FP32 = 7
    DT_BF16 = 8
    DT_HF4 = 9
    DT_HF8 = 10
    DT_UINT8 = 11
    DT_UINT16 = 12
    DT_UINT32 = 13
    DT_UINT64 = 14
    DT_BOOL = 15
    DT_DOUBLE = 16
    DT_FP8E4M3 = 17
    DT_FP8E5M2 = 18
    DT_FP8E8M0 = 19
    DT_FP4_E2M1X2 = 20
    DT_FP4_E1M2X2 = 21
    DT_FP4_E2M1 = 22
    DT_FP4_E1M2 = 23
    DT_BOTTOM = 24

    # Upstream prints members as "DataType.DT_FP16" in repr and str; error messages rely on it.
    def __repr__(self):
        return f"DataType.{self.name}"

    __str__ = __repr__


class TileOpFormat(enum.IntEnum):
    """Tensor layout tags (upstream ``TileOpFormat``); host tensors here are always ND."""

    TILEOP_ND = 0
    TILEOP_NZ = 1
    TILEOP_NC1HWC0 = 2
    TILEOP_FRACTAL_Z = 3

    def __repr__(self):
        return f"TileOpFormat.{self.name}"

    __str__ = __repr__


# The one table of element types that can hold host data: DataType <-> NumPy dtype. bfloat16
# comes from ml_dtypes, imported only when bf16 data is involved (its start-up costs ~0.5 s).
_NUMPY_OF = {
    DataType.DT_INT8: np.dtype(np.int8),
    DataType.DT_INT16: np.dtype(np.int16),
    DataType.DT_INT32: np.dtype(np.int32),
    DataType.DT_INT64: np.dtype(np.int64),
    DataType.DT_FP16: np.dtype(np.float16),
    DataType.DT_FP32: np.dtype(np.float32),
    DataType.DT_UINT8: np.dtype(np.uint8),
    DataType.DT_UINT16: np.dtype(np.uint16),
    DataType.DT_UINT32: np.dtype(np.uint32),
    DataType.DT_UINT64: np.dtype(np.uint64),
    DataType.DT_BOOL: np.dtype(np.bool_),
    DataType.DT_DOUBLE: np.dtype(np.float64),
}
_DATATYPE_OF = {dt: t for t, dt in _NUMPY_OF.items()}
_SUB_BYTE = {
    DataType.DT_INT4: 1,
    DataType.DT_HF4: 1,
    DataType.DT_FP4_E2M1: 1,
    DataType.DT_FP4_E1M2: 1,
}


@functools.lru_cache(maxsize=1)
def _bfloat16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def dtype_size(dtype):
    """Bytes per element of ``dtype`` (sub-byte types count as 1)."""
    if dtype == DataType.DT_BF16:
        return 2
    if dtype in _NUMPY_OF:
        return _NUMPY_OF[dtype].itemsize
    return _SUB_BYTE.get(dtype, 1)


def numpy_dtype(dtype):
    """The NumPy dtype that holds host data of ``dtype``, or None when there is none."""
    if dtype == DataType.DT_BF16:
        return _bfloat16()
    return _NUMPY_OF.get(dtype)


def from_numpy_dtype(np_dtype):
    """The DataType of a NumPy dtype, or None when pypto has no such type.

    Byte order does not matter here: a big-endian array maps like a native one.
    """
    if isinstance(np_dtype, np.dtype):  # the common case, an array's native dtype: one lookup
        found = _DATATYPE_OF.get(np_dtype)
        if found is not None:
            return found
    np_dtype = np.dtype(np_dtype)
    if np_dtype.byteorder not in "=|":
        np_dtype = np_dtype.newbyteorder("=")
    found = _DATATYPE_OF.get(np_dtype)
    # an ml_dtypes type means ml_dtypes is loaded already: comparing costs nothing then
    if found is None and type(np_dtype.type).__module__ != "numpy" and np_dtype == _bfloat16():
        return DataType.DT_BF16
    return found


# The one map between the op's two dtypes and their names on the command line, in manifests
# and in messages.
DTYPE_NAMES = {"fp16": DataType.DT_FP16, "bf16": DataType.DT_BF16}


def dtype_name(dtype):
    """ "fp16" or "bf16" for DT_FP16 / DT_BF16."""
    return "fp16" if dtype == DataType.DT_FP16 else "bf16"


def parse_dtype_name(dtype):
    """DT_FP16 / DT_BF16 from a DataType or the names "fp16", "bf16" (any case, spaces
    around); None stays None. Anything else is a PyptoError."""
    from .error import FeError

    if dtype is None or dtype in (DataType.DT_FP16, DataType.DT_BF16):
        return dtype
    if isinstance(dtype, str) and dtype.strip().lower() in DTYPE_NAMES:
        return DTYPE_NAMES[dtype.strip().lower()]
    raise FeError(
        ValueError(
            f"dtype must be 'fp16', 'bf16', pypto.DT_FP16 or pypto.DT_BF16, but got {dtype!r}"
        )
    )
