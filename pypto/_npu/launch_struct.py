"""ctypes mirror of ``pypto/_npu/kernel/pypto_conv_dx_tiling.h``, the kernel's launch struct.

The C header is the source of truth. Field names are the header's (CANN's, for the API part),
the constants are its ``#define``s; tests compile a C program against the header and compare
sizeof, every offset and every constant with this module.
"""

import ctypes

from .._core.tiling import MAX_BLOCKS  # the task grid's limit, defined with it
from ..error import PyptoRtError

__all__ = [
    "ConvDxApiTiling",
    "ConvDxLaunch",
    "filled",
    "API_U32_FIELDS",
    "MAGIC",
    "DONE_SLOT_BYTES",
    "MAX_BLOCKS",
    "FP16",
    "BF16",
    "B2_BASEK_LT_HKWK",
    "B2_BASEK_GE_HKWK",
    "B2_HKWK_EQ_ONE",
]

MAGIC = 0x50434458
API_TILING_BYTES = 280
LAUNCH_BYTES = 328
DONE_SLOT_BYTES = 64
# The workspace is the done slots only, from its first byte: the kernel uses no AscendC system
# workspace (none is allocated).
FP16, BF16 = 0, 1
B2_BASEK_LT_HKWK, B2_BASEK_GE_HKWK, B2_HKWK_EQ_ONE = 0, 1, 2

# TConv3DBackpropInputTiling's 60 uint32 fields, in CANN's order.
API_U32_FIELDS = (
    "batch",
    "cin",
    "cout",
    "cout1",
    "cin1",
    "cout1G",
    "cin1G",
    "c0",
    "c0Bits",
    "dout",
    "ho",
    "wo",
    "di",
    "hi",
    "wi",
    "dk",
    "hk",
    "wk",
    "group",
    "strideD",
    "strideH",
    "strideW",
    "padFront",
    "padBack",
    "padUp",
    "padDown",
    "padLeft",
    "padRight",
    "backpropPadTail",
    "backpropPadUp",
    "backpropPadDown",
    "backpropPadLeft",
    "backpropPadRight",
    "dilationD",
    "dilationH",
    "dilationW",
    "al0Pbuffer",
    "bl0Pbuffer",
    "cl0Pbuffer",
    "al1Pbuffer",
    "bl1Pbuffer",
    "singleCoreGroup",
    "singleCoreCout",
    "singleCoreCout1",
    "singleCoreCin1",
    "singleCoreDin",
    "singleCoreHo",
    "baseM",
    "baseK",
    "baseN",
    "baseD",
    "baseBatch",
    "baseGroup",
    "stepM",
    "stepN",
    "stepKa",
    "stepKb",
    "stepBatch",
    "stepGroup",
    "iterateOrder",
)


class ConvDxApiTiling(ctypes.Structure):
    """What the Conv3DBackpropInput API reads (CANN's TConv3DBackpropInputTiling, 280 bytes)."""

    _fields_ = [(name, ctypes.c_uint32) for name in API_U32_FIELDS] + [
        ("hf32Flag", ctypes.c_int32),
        ("initOutputFlag", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("singleCoreBatch", ctypes.c_uint64),
        ("singleCoreM", ctypes.c_uint64),
        ("singleCoreCin", ctypes.c_uint64),
    ]


class ConvDxLaunch(ctypes.Structure):
    """PyptoConvDxLaunch: one launch's task grid, completion slot and the API tiling."""

    _fields_ = [
        ("magic", ctypes.c_uint32),
        ("dtype", ctypes.c_uint32),
        ("loadB2Mode", ctypes.c_uint32),
        ("batchStart", ctypes.c_uint32),
        ("batchCount", ctypes.c_uint32),
        ("mTasks", ctypes.c_uint32),
        ("nTasks", ctypes.c_uint32),
        ("rowsPerTask", ctypes.c_uint32),
        ("cinPerTask", ctypes.c_uint32),
        ("doneSlot", ctypes.c_uint32),
        ("doneToken", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("api", ConvDxApiTiling),
    ]


_RANGES = {
    ctypes.c_uint32: (0, (1 << 32) - 1, "uint32"),
    ctypes.c_int32: (-(1 << 31), (1 << 31) - 1, "int32"),
    ctypes.c_uint64: (0, (1 << 64) - 1, "uint64"),
}


def filled(struct_type, **values):
    """``struct_type(**values)``, after checking that every integer fits its field: ctypes
    would silently keep only the low bits, and a truncated tiling is a device fault."""
    types = dict(struct_type._fields_)
    for name, value in values.items():
        bounds = _RANGES.get(types[name])
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            raise PyptoRtError(
                OverflowError(
                    f"internal error: {struct_type.__name__}.{name} = {value} does not fit its "
                    f"{bounds[2]} field"
                )
            )
    return struct_type(**values)


# The header static_asserts the same sizes; a drift here must not reach a launch.
_SIZES = (ctypes.sizeof(ConvDxApiTiling), ctypes.sizeof(ConvDxLaunch))
if _SIZES != (API_TILING_BYTES, LAUNCH_BYTES):
    raise ImportError(
        f"ctypes launch struct sizes {_SIZES} differ from pypto_conv_dx_tiling.h's "
        f"{(API_TILING_BYTES, LAUNCH_BYTES)}"
    )
