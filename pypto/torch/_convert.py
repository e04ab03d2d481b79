"""torch's conventions as pypto's: dtypes, int-or-pair arguments, and tensors moved to the
host (or found to hold no data)."""

import torch

from .._dtypes import DataType
from ..error import ConvBpValueError

try:  # torch's own class of data-less tensors (torch.compile's tracing); private, so guarded
    from torch._subclasses.fake_tensor import FakeTensor
except ImportError:  # pragma: no cover - every torch pypto supports has it

    class FakeTensor:  # isinstance() is then never true
        pass


# torch dtype -> pypto DataType, for shape-only validation (the op names the dtype it refuses)
_DTYPES = {
    torch.float16: DataType.DT_FP16,
    torch.bfloat16: DataType.DT_BF16,
    torch.float32: DataType.DT_FP32,
    torch.float64: DataType.DT_DOUBLE,
    torch.int8: DataType.DT_INT8,
    torch.int16: DataType.DT_INT16,
    torch.int32: DataType.DT_INT32,
    torch.int64: DataType.DT_INT64,
    torch.uint8: DataType.DT_UINT8,
    torch.bool: DataType.DT_BOOL,
}
for _name, _member in (
    ("float8_e4m3fn", DataType.DT_FP8E4M3),
    ("float8_e5m2", DataType.DT_FP8E5M2),
    ("float8_e8m0fnu", DataType.DT_FP8E8M0),
    ("uint16", DataType.DT_UINT16),
    ("uint32", DataType.DT_UINT32),
    ("uint64", DataType.DT_UINT64),
):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _member


def _datatype(dtype):
    """The pypto DataType of a torch dtype (DT_BOTTOM for one pypto has no name for: the op
    refuses it by rule D1 all the same)."""
    return _DTYPES.get(dtype, DataType.DT_BOTTOM)


_DTYPE_NAMES = {
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float32: "fp32",
    torch.float64: "fp64",
}


def _dtype_name(dtype):
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def _pair(value, name):
    """torch's int-or-pair: an int (or anything not a sequence: the op's T1 names it) for both
    axes, or a sequence of two."""
    if isinstance(value, (list, tuple, torch.Size)):
        if len(value) != 2:
            raise ConvBpValueError(
                "R1",
                f"Input illegal {name} size:{len(value)}, which must be "
                f"2 for a 2-D convolution (an int or a pair (h, w)), "
                f"but got {tuple(value)!r}.",
            )
        return [value[0], value[1]]
    return [value, value]


def _four(padding):
    """torch's (h, w) padding -> pypto's [top, bottom, left, right]."""
    ph, pw = _pair(padding, "padding")
    return [ph, ph, pw, pw]


def _tuple(value):
    return tuple(value) if isinstance(value, (list, tuple, torch.Size)) else value


def _list(value):
    return list(value) if isinstance(value, (tuple, torch.Size)) else value


def _host(t):
    """A CPU tensor holding ``t``'s values, with nothing lazy (negation, conjugation)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.resolve_neg().resolve_conj()


def _without_data(*tensors):
    """Why a call's tensors cannot be read (a meta or fake tensor: shapes only), or None."""
    for t in tensors:
        if t.device.type == "meta":
            return "a tensor on the meta device"
        if isinstance(t, FakeTensor):
            return "a fake tensor (FakeTensorMode)"
    return None


def _from_array(array, dtype):
    """A torch tensor on ``array`` (pypto's result: fresh memory, fp16 or bf16)."""
    if dtype == torch.bfloat16:
        return torch.from_numpy(array.view("int16")).view(torch.bfloat16)
    return torch.from_numpy(array)
