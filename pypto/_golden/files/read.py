"""Reading a golden case: the manifest checked before anything is allocated, then the arrays
(sizes and digests first), the kernel's result, and the stale-file warning."""

import hashlib
import math
import os
import re

import numpy as np

from ..._core.fileio import (
    check_npy_bytes,
    npy_header,
    open_regular,
    read_json,
    show,
)
from ..._core.options import SUM_ORDERS
from ..._dtypes import DTYPE_NAMES
from ..case import check_golden, make_case
from .dims import LAYOUTS, NCHW, array_from, shape_in
from .layout import ACTUAL, BIN_DTYPES, FILES, FORMAT, FORMAT_LAID_OUT, MANIFEST, case_error

__all__ = [
    "read_case",
    "read_inputs",
    "read_array",
    "read_result",
    "result_layout",
    "resolve_actual",
    "stale_warning",
]


def _ints(manifest, key, length, where):
    value = manifest.get(key)
    if (
        not isinstance(value, list)
        or len(value) != length
        or not all(type(v) is int for v in value)
    ):
        raise case_error(f"{where}: '{key}' must be a list of {length} ints, but is {show(value)}")
    return value


def _relative_name(value, where):
    """A file name of the manifest: a relative path that stays inside the case folder (a
    hand-edited manifest must not make compare open /etc/passwd or ../../x)."""
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise case_error(f"{where} must be a file name (a string), but is {show(value)}")
    norm = os.path.normpath(value)
    if (
        os.path.isabs(value)
        or norm in (os.curdir, os.pardir)
        or norm.startswith(os.pardir + os.sep)
    ):
        raise case_error(
            f"{where} must be a path relative to the case folder and inside it, but "
            f"is {show(value)}"
        )
    return value


_HEX = re.compile(r"[0-9a-f]{64}")
# key in a file entry: (check, what it must be)
_ENTRY_KEYS = {
    "bin": (None, "a file name"),
    "npy": (None, "a file name"),
    "npy_also_read": (None, "a file name"),
    "dtype": (lambda v: isinstance(v, str), "a string"),
    "layout": (lambda v: v in LAYOUTS, "one of " + ", ".join(LAYOUTS)),
    "shape": (
        lambda v: isinstance(v, list) and all(type(x) is int and x >= 0 for x in v),
        "a list of ints >= 0",
    ),
    "bytes": (lambda v: type(v) is int and v >= 0, "an int >= 0"),
    "note": (lambda v: isinstance(v, str), "a string"),
    "bin_sha256": (lambda v: isinstance(v, str) and _HEX.fullmatch(v), "64 hex digits"),
    "npy_sha256": (lambda v: isinstance(v, str) and _HEX.fullmatch(v), "64 hex digits"),
}
# optional top-level key: (check, what it must be)
_TOP_KEYS = {
    "pypto_version": (lambda v: isinstance(v, str), "a string"),
    "op": (lambda v: v == "conv_backward_input", "'conv_backward_input'"),
    "seed": (lambda v: v is None or (type(v) is int and v >= 0), "an int >= 0"),
    "dist": (lambda v: isinstance(v, str), "a string"),
    "byte_order": (lambda v: v == "little", "'little' (every file is little-endian)"),
    "sum_order": (lambda v: v in SUM_ORDERS, " or ".join(map(repr, SUM_ORDERS))),
}


def _check_manifest(manifest, path):
    """Type-check every field ``pypto golden`` writes (a missing optional one is fine): one
    PyptoError naming the field, never a TypeError deep inside compare."""
    if not isinstance(manifest, dict) or manifest.get("format") not in (FORMAT, FORMAT_LAID_OUT):
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise case_error(
            f"{path}: format {show(found)}, expected {FORMAT!r} (or {FORMAT_LAID_OUT!r}: "
            f"files in other layouts)"
        )
    dtype = manifest.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPE_NAMES:
        raise case_error(f"{path}: 'dtype' must be 'fp16' or 'bf16', but is {show(dtype)}")
    for key, (ok, what) in _TOP_KEYS.items():
        if key in manifest and not ok(manifest[key]):
            raise case_error(f"{path}: '{key}' must be {what}, but is {show(manifest[key])}")
    tiles = manifest.get("tiles")
    if not isinstance(tiles, dict):
        raise case_error(f"{path}: 'tiles' must be an object with l1, l0 and vec")
    vec = tiles.get("vec")
    if not isinstance(vec, list) or not all(type(v) is int for v in vec):
        raise case_error(f"{path}: tiles 'vec' must be a list of ints, but is {show(vec)}")
    if "order" in tiles and not isinstance(tiles["order"], str):
        raise case_error(f"{path}: tiles 'order' must be a string, but is {show(tiles['order'])}")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise case_error(f"{path}: 'files' must be an object")
    for name, entry in files.items():
        if name not in FILES and name != "actual":
            continue  # not read: a harness's own entry
        if not isinstance(entry, dict):
            raise case_error(f"{path}: files '{name}' must be an object, but is {show(entry)}")
        for key, (ok, what) in _ENTRY_KEYS.items():
            if key not in entry:
                continue
            where = f"{path}: files '{name}' '{key}'"
            if ok is None:
                _relative_name(entry[key], where)
            elif not ok(entry[key]):
                raise case_error(f"{where} must be {what}, but is {show(entry[key])}")


def read_case(directory):
    """(Case, manifest) from DIR/manifest.json, every field type-checked and the problem
    validated by the op's rules."""
    path = os.path.join(directory, MANIFEST)
    if not os.path.lexists(path):
        raise case_error(f"{path} not found: is {directory} a case written by `pypto golden`?")
    manifest = read_json(path, "the manifest")
    _check_manifest(manifest, path)
    tiles = manifest["tiles"]
    l1, l0 = _ints(tiles, "l1", 3, path + " tiles"), _ints(tiles, "l0", 3, path + " tiles")
    case = make_case(
        _ints(manifest, "grad_output", 4, path),
        _ints(manifest, "weight", 4, path),
        _ints(manifest, "input_size", 4, path),
        manifest["dtype"],
        _ints(manifest, "strides", 2, path),
        _ints(manifest, "paddings", 4, path),
        _ints(manifest, "dilations", 2, path),
        tiles=(l1, l0),
        vec=tiles["vec"],
    )
    return case, manifest


def _size_hint(found, expected):
    for name, factor in (("float32", 2), ("float64", 4)):
        if found == expected * factor:
            return f" (the size of {name} data of that shape: the file must hold 16-bit values)"
    if found == expected // 2:
        return " (half the size: 8-bit data, or a truncated file?)"
    if found < expected:
        return " (truncated?)"
    return ""


def read_array(path, dtype_name, shape, case, sha256=None):
    """The array in ``path`` (.npy by its header, anything else as a raw .bin of
    ``dtype_name`` and ``shape``); bf16 comes back as ml_dtypes.bfloat16. ``sha256``: the
    digest the .bin must have (the manifest's), or None."""
    if path.endswith(".npy"):
        data = _read_npy(path, dtype_name, shape)
    else:
        itemsize = np.dtype(BIN_DTYPES[dtype_name]).itemsize
        expected = math.prod(shape) * itemsize
        with open_regular(path, "the data file") as f:
            found = os.fstat(f.fileno()).st_size
            if found != expected:
                raise case_error(
                    f"{path} has {found} bytes, expected {expected} ({dtype_name} "
                    f"{list(shape)} = {math.prod(shape)} elements x {itemsize} bytes)"
                    + (_size_hint(found, expected) if itemsize == 2 else "")
                )
            data = np.empty(math.prod(shape), dtype=BIN_DTYPES[dtype_name])
            raw = memoryview(data).cast("B")
            try:
                got = f.readinto(raw)
            except OSError as exc:
                raise case_error(f"cannot read {path}: {exc}") from None
        if got != expected:
            raise case_error(f"cannot read {path}: {got} of its {expected} bytes (it changed?)")
        if sha256 is not None and hashlib.sha256(raw).hexdigest() != sha256:
            raise case_error(
                f"{path} does not match the sha256 manifest.json records for it: the "
                f"file changed after `pypto golden` wrote it (corrupted or edited case)"
            )
        data = data.reshape(shape)
    data = data.astype(data.dtype.newbyteorder("="), copy=False)
    if dtype_name == "bf16":
        return data.view(case.np_dtype)
    return data


def _read_npy(path, dtype_name, shape):
    # the header first: a few bytes that claim 10^12 elements must not be allocated
    with open_regular(path, "the .npy file") as f:
        found_shape, fortran, dt, offset, held = npy_header(f, path)
    if dtype_name == "fp16":
        ok = dt.kind == "f" and dt.itemsize == 2
        want = "float16"
    elif dtype_name == "bf16":
        ok = dt.itemsize == 2 and (dt.kind in "uV" or dt.name == "bfloat16")
        want = "bfloat16 (as uint16, void16 or ml_dtypes.bfloat16)"
    else:
        ok = dt.kind == "f" and not dt.hasobject
        want = "float"
    if not ok:
        raise case_error(f"{path} holds {dt} data; expected {want} ({dtype_name})")
    if list(found_shape) != list(shape):
        raise case_error(f"{path} has shape {list(found_shape)}, expected {list(shape)}")
    check_npy_bytes(path, found_shape, dt, held)
    count = math.prod(found_shape)
    try:
        with open_regular(path, "the .npy file") as f:
            f.seek(offset)
            data = np.fromfile(f, dtype=dt, count=count)
    except (OSError, ValueError) as exc:
        raise case_error(f"cannot read {path} as .npy: {exc}") from None
    if data.size != count:
        raise case_error(
            f"cannot read {path} as .npy: {data.size} of its {count} elements (it changed?)"
        )
    data = data.reshape(found_shape, order="F" if fortran else "C")
    if dtype_name == "bf16":
        data = np.ascontiguousarray(data).view(f"{dt.byteorder if dt.byteorder in '<>' else '='}u2")
    return data.astype(np.float64) if dtype_name == "float64" else data


def read_inputs(directory, case, manifest):
    """(dy, w, golden, pypto's result) of a case, by the manifest's file names (checked by
    read_case), each checked against its sha256 when the manifest has one; the golden also
    against the inputs (``check_golden``)."""
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise case_error(f"{os.path.join(directory, MANIFEST)}: 'files' must be an object")
    shapes = {
        "grad_output": case.grad_output_shape,
        "weight": case.weight_shape,
        "golden": case.input_size,
        "pypto": case.input_size,
    }
    arrays = []
    for name in ("grad_output", "weight", "golden", "pypto"):
        entry = files.get(name)
        if not isinstance(entry, dict):
            entry = {}
        relative = entry.get("bin", FILES[name][0] + ".bin")
        dtype_name = "float64" if name == "golden" else case.dtype_name
        layout = entry.get("layout", NCHW)  # a manifest written before layouts: NCHW
        data = read_array(
            os.path.join(directory, relative),
            dtype_name,
            shape_in(shapes[name], layout),
            case,
            entry.get("bin_sha256"),
        )
        arrays.append(array_from(data, layout))
    dy, w, golden, _ = arrays
    golden_entry = files.get("golden") if isinstance(files.get("golden"), dict) else {}
    # a NaN (or edited) golden would pass a NaN result: check it against the inputs
    check_golden(
        case,
        dy,
        w,
        golden,
        os.path.join(directory, golden_entry.get("bin", FILES["golden"][0] + ".bin")),
    )
    return tuple(arrays)


def stale_warning(directory, path, manifest):
    """A one-line warning when the result file ``path`` is older than the case's manifest (a
    result of an earlier case, say), else None. The case's own files are not results."""
    own = set()
    files = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    for name in FILES:
        entry = files.get(name) if isinstance(files.get(name), dict) else {}
        for key in ("bin", "npy"):
            own.add(
                os.path.realpath(
                    os.path.join(directory, entry.get(key, FILES[name][0] + "." + key))
                )
            )
    try:
        if os.path.realpath(path) in own:
            return None
        older = os.stat(path).st_mtime_ns < os.stat(os.path.join(directory, MANIFEST)).st_mtime_ns
    except OSError:
        return None
    if older:
        return (
            f"warning: {path} is older than {os.path.join(directory, MANIFEST)}: is it the "
            f"result of an earlier case?"
        )
    return None


def resolve_actual(directory, path):
    """The result file: ``path`` as given when it exists, else under DIR/output/; by default
    DIR/output/output.bin."""
    if path is None:
        return os.path.join(directory, ACTUAL[0] + ".bin")
    if os.path.exists(path) or os.path.isabs(path):
        return path
    inside = os.path.join(directory, "output", path)
    return inside if os.path.exists(inside) else path


def result_layout(manifest):
    """The layout the kernel writes dx in: the manifest's "actual" entry's, else the golden's
    (NCHW in a manifest written before layouts)."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    for name in ("actual", "golden"):
        entry = files.get(name) if isinstance(files, dict) else None
        if isinstance(entry, dict) and entry.get("layout") in LAYOUTS:
            return entry["layout"]
    return NCHW


def read_result(directory, case, path, manifest=None):
    """The kernel's dx from ``path`` (.bin or .npy), checked against the case's dtype/shape,
    in NCHW: read in the layout ``manifest`` gives it (:func:`result_layout`; NCHW without)."""
    layout = result_layout(manifest)
    data = read_array(
        resolve_actual(directory, path),
        case.dtype_name,
        shape_in(case.input_size, layout),
        case,
    )
    return array_from(data, layout)
