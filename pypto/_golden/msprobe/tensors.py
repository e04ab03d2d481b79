"""The tensor files of the calls to judge: where each is (``dump_tensor_data/`` beside
dump.json, else the dump's ``dump_data_dir``), all checked present before any work, and each
read (``.pt`` from PyTorch, ``.npy`` from MindSpore) as the fp16/bf16 array its record in
dump.json describes."""

import math
import os

import numpy as np

from ..._core.fileio import check_npy_bytes, npy_header, open_regular
from ..._dtypes import DTYPE_NAMES, numpy_dtype
from .records import CALL_TENSORS, TENSOR_FOLDER, dump_error, tensor_shape

__all__ = ["MAX_LISTED", "locate_tensor_files", "read_call_tensors", "read_tensor"]

MAX_LISTED = 5  # missing files named in the error before "and N more"


def _tensor_path(call, record, dump):
    name = record.get("data_name")
    if not isinstance(name, str) or not name:
        raise dump_error(
            f"{call.dump_json}: {call.api} has a tensor without a file (no "
            f'"data_name"): was the dump made with task "tensor"?'
        )
    if name != os.path.basename(name) or name in (".", ".."):
        raise dump_error(
            f"{call.dump_json}: {call.api} names the tensor file {name!r}, which is "
            f"not a plain file name"
        )
    folder = os.path.join(os.path.dirname(call.dump_json), TENSOR_FOLDER)
    there = dump.get("dump_data_dir")
    if not os.path.isdir(folder) and isinstance(there, str) and os.path.isdir(there):
        folder = there  # dump.json alone, its tensors where msprobe wrote them
    return os.path.join(folder, name)


def locate_tensor_files(calls, dumps):
    """Fill in ``call.files`` of every call not skipped (``dumps``: {dump.json: its dict}); a
    PyptoError naming the missing files, before any is read."""
    missing = []
    for call in calls:
        if call.skip is not None:
            continue
        for name in CALL_TENSORS:
            file = _tensor_path(call, call.tensors[name], dumps[call.dump_json])
            call.files[name] = file
            if not os.path.exists(file):  # a FIFO or a device is refused when read
                missing.append(f"{file} ({call.api} {name})")
    if missing:
        more = f" and {len(missing) - MAX_LISTED} more" if len(missing) > MAX_LISTED else ""
        raise dump_error(
            f"{len(missing)} tensor file(s) that dump.json names are missing: "
            f"{', '.join(missing[:MAX_LISTED])}{more}"
        )


def read_call_tensors(call):
    """{grad_output, weight, grad_input}: the arrays of a located call."""
    return {
        name: read_tensor(call.files[name], call.tensors[name], call.dtype, f"{call.api} {name}")
        for name in CALL_TENSORS
    }


def read_tensor(path, record, dtype_name, what):
    """The fp16/bf16 array a tensor file holds, checked against its record in dump.json."""
    shape = tensor_shape(record)
    np_dtype = numpy_dtype(DTYPE_NAMES[dtype_name])
    if path.endswith(".pt"):
        array = _read_pt(path, record, dtype_name, what, np_dtype)
    elif path.endswith(".npy"):
        array = _read_npy(path, record, shape, dtype_name, what, np_dtype)
    else:
        raise dump_error(f"{path} ({what}): unknown tensor file type (msprobe writes .pt and .npy)")
    if list(array.shape) != list(shape):
        raise dump_error(
            f"{path} ({what}) has shape {list(array.shape)}, but dump.json says {list(shape)}"
        )
    return np.ascontiguousarray(array)


def _read_pt(path, record, dtype_name, what, np_dtype):
    """A .pt tensor file's data. The file is mapped, not read: a storage its pickle claims
    beyond the file's bytes fails to map instead of being allocated; the data is then copied
    (its size bounded by the file's), so nothing stays mapped."""
    try:
        import torch
    except ImportError:
        raise dump_error(
            f"reading {path} needs PyTorch (torch.load), which is not installed: pip install torch",
            RuntimeError,
        ) from None
    open_regular(path, what).close()  # a FIFO or a device is refused, not read
    try:
        value = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # pickle, zip and torch errors alike
        raise dump_error(f"cannot read {what} from {path}: {type(exc).__name__}: {exc}") from None
    if not isinstance(value, torch.Tensor):
        raise dump_error(f"{path} ({what}) holds a {type(value).__name__}, not a tensor")
    found = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(value.dtype, str(value.dtype))
    if found != dtype_name:
        raise dump_error(
            f"{path} ({what}) holds {value.dtype} data, but dump.json says {record.get('dtype')}"
        )
    value = value.detach().contiguous()
    bits = value.view(torch.int16) if value.dtype == torch.bfloat16 else value
    return bits.numpy().view(np_dtype).copy()


def _read_npy(path, record, shape, dtype_name, what, np_dtype):
    """A .npy tensor file's data, its header checked against the record and the file's size
    first: a header claiming 10^12 elements is refused, not allocated."""
    with open_regular(path, what) as f:
        found_shape, fortran, dt, offset, held = npy_header(f, path)
        if dt != np_dtype and not (dt.kind == "f" and not dt.hasobject):
            raise dump_error(
                f"{path} ({what}) holds {dt} data, but dump.json says {record.get('dtype')}"
            )
        if list(found_shape) != list(shape):
            raise dump_error(
                f"{path} ({what}) has shape {list(found_shape)}, but dump.json says {list(shape)}"
            )
        check_npy_bytes(path, found_shape, dt, held)
        count = math.prod(found_shape)
        try:
            f.seek(offset)
            array = np.fromfile(f, dtype=dt, count=count)
        except (OSError, ValueError) as exc:
            raise dump_error(f"cannot read {what} from {path}: {exc}") from None
    if array.size != count:
        raise dump_error(f"cannot read {what} from {path}: {array.size} of {count} elements")
    array = array.reshape(found_shape, order="F" if fortran else "C")
    if dt == np_dtype:
        return array
    # MindSpore writes bf16 as float32: exactly, or not at all
    converted = array.astype(np_dtype)
    if not np.array_equal(converted.astype(array.dtype), array, equal_nan=True):
        raise dump_error(
            f"{path} ({what}) holds {array.dtype} values that are not all {dtype_name} "
            f"values, but dump.json says {record.get('dtype')}"
        )
    return converted
