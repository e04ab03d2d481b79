"""The files of a golden case: the layout ``pypto golden`` writes and ``pypto compare`` reads.

    DIR/manifest.json             shapes, dtypes, attributes, tiles, seed, files, pypto version,
                                  the sum order of pypto's own result
    DIR/input/grad_output.bin     dy  [N, Cout, Hout, Wout]   fp16 / bf16
    DIR/input/weight.bin          w   [Cout, Cin, Kh, Kw]     fp16 / bf16
    DIR/output/golden.bin         dx  [N, Cin, Hin, Win]      float64 (the golden, unrounded)
    DIR/output/pypto.bin          dx                          fp16 / bf16 (pypto's own result)
    DIR/output/output.bin         dx                          fp16 / bf16: the kernel writes it

Every ``.bin`` is raw little-endian C-order data as NumPy's ``tofile`` writes it (bf16 as its
16-bit patterns: read it as uint16 or ``ml_dtypes.bfloat16``); each has a ``.npy`` twin (bf16
as uint16). Shapes and dtypes travel in the manifest. Every fault in a file (missing, wrong
size, wrong dtype or shape, bad manifest) is a PyptoError naming the file and what was expected.

The manifest is written last (a temporary file, then ``os.replace``), so an interrupted write
never leaves a manifest describing files that are not there; it records each file's sha256,
which ``compare`` checks. Writing into a folder that already holds a case needs ``replace``
(``--force``), which also deletes the old kernel results in output/: a new case never sits
beside a result of the old one.
"""

import hashlib
import json
import math
import os
import re

import numpy as np

from .._core.fileio import (
    atomic_writer,
    check_npy_bytes,
    file_sha256,
    npy_header,
    open_regular,
    read_json,
    show,
)
from .._core.options import SUM_ORDERS, get_sum_order
from .._dtypes import DTYPE_NAMES
from .._version import __version__
from ..error import FeError
from .case import check_golden, make_case

__all__ = [
    "write_case",
    "read_case",
    "read_inputs",
    "read_result",
    "resolve_actual",
    "FORMAT",
    "FILES",
    "ACTUAL",
    "check_path",
    "check_case_folder",
    "stale_warning",
]

FORMAT = "pypto-golden/1"
MANIFEST = "manifest.json"
# name: (path without extension, what it holds)
FILES = {
    "grad_output": ("input/grad_output", "dy, the kernel's input"),
    "weight": ("input/weight", "w, the kernel's input"),
    "golden": (
        "output/golden",
        "dx in float64 from the fp16/bf16 inputs (exact products, float64 sums), not rounded",
    ),
    "pypto": ("output/pypto", "pypto's own dx: fp32 accumulation, one round-to-nearest-even"),
}
ACTUAL = ("output/output", "dx from the kernel under test: write it here")
_BIN_DTYPES = {"fp16": "<f2", "bf16": "<u2", "float64": "<f8"}


def _error(text):
    return FeError(ValueError(text))


def check_path(value, what, folder=False):
    """``value`` unless it is empty or blank: an empty path would silently mean the current
    folder (or a hidden '.png' there)."""
    hint = "a folder (. for the current one)" if folder else "a file name"
    if not isinstance(value, str) or not value.strip():
        raise _error(f"{what} is {show(value)}, an empty or blank path: give {hint}")
    if "\0" in value:
        raise _error(f"{what} is {show(value)}, which holds a NUL character: give {hint}")
    return value


def _file_entry(stem, dtype_name, shape, note):
    itemsize = np.dtype(_BIN_DTYPES[dtype_name]).itemsize
    return {
        "bin": stem + ".bin",
        "npy": stem + ".npy",
        "dtype": dtype_name,
        "shape": list(shape),
        "bytes": math.prod(shape) * itemsize,
        "note": note,
    }


def _write(directory, stem, array, dtype_name):
    """Write ``stem``.bin and .npy; their sha256 digests (of what is on disk)."""
    data = np.ascontiguousarray(array)
    if dtype_name == "bf16":
        data = data.view(np.uint16)
    data = data.astype(_BIN_DTYPES[dtype_name], copy=False)
    digests = {}
    for ext in ("bin", "npy"):
        path = os.path.join(directory, f"{stem}.{ext}")
        with atomic_writer(path, "wb") as f:
            if ext == "bin":
                data.tofile(f)
            else:
                np.save(f, data, allow_pickle=False)
        digests[ext + "_sha256"] = file_sha256(path)
    return digests


def _case_files(directory):
    """What of a case is already in ``directory``: manifest.json and the files in input/ and
    output/ (relative names, sorted)."""
    found = [MANIFEST] if os.path.lexists(os.path.join(directory, MANIFEST)) else []
    for sub in ("input", "output"):
        folder = os.path.join(directory, sub)
        if os.path.isdir(folder):
            found += sorted(f"{sub}/{name}" for name in os.listdir(folder))
        elif os.path.lexists(folder):
            found.append(sub)
    return found


def check_case_folder(directory, replace):
    """Refuse, before any work, a ``directory`` that cannot take a case, or that already holds
    one when ``replace`` (``--force``) is not given: writing over it would leave the old
    kernel result beside the new case, and ``compare`` would judge it."""
    check_path(directory, "--out", folder=True)
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise _error(f"cannot write the case to {directory}: it is a file, not a folder")
    try:
        found = _case_files(directory) if os.path.isdir(directory) else []
    except OSError as exc:
        raise _error(f"cannot write the case to {directory}: {exc}") from None
    if found and not replace:
        shown = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
        raise _error(
            f"{directory} already holds a golden case ({shown}): pass --force to "
            f"replace it (which deletes its old kernel results in output/)"
        )


def _remove_stale(directory, keep):
    """Delete the old manifest and every file in output/ that is not in ``keep`` (the old
    kernel results); the relative names removed."""
    removed = []
    manifest = os.path.join(directory, MANIFEST)
    if os.path.lexists(manifest):
        os.remove(manifest)  # first: until the new one is written, no manifest at all
    folder = os.path.join(directory, "output")
    if os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            # files and links only: a folder in output/ is the user's, not a kernel result
            if f"output/{name}" not in keep and (os.path.islink(path) or not os.path.isdir(path)):
                os.remove(path)
                removed.append(f"output/{name}")
    return removed


def write_case(directory, case, dy, w, golden, reference, seed, dist, replace=False):
    """Write a case's inputs, golden, pypto's result and manifest: (manifest, the old files of
    output/ that were deleted). ``replace``: the folder may hold a case (see
    :func:`check_case_folder`); its old kernel results are deleted."""
    check_case_folder(directory, replace)
    dt = case.dtype_name
    shapes = {
        "grad_output": case.grad_output_shape,
        "weight": case.weight_shape,
        "golden": case.input_size,
        "pypto": case.input_size,
    }
    dtypes = {"grad_output": dt, "weight": dt, "golden": "float64", "pypto": dt}
    files = {
        name: _file_entry(stem, dtypes[name], shapes[name], note)
        for name, (stem, note) in FILES.items()
    }
    files["actual"] = _file_entry(ACTUAL[0], dt, case.input_size, ACTUAL[1])
    del files["actual"]["npy"]
    files["actual"]["npy_also_read"] = ACTUAL[0] + ".npy"
    manifest = {
        "format": FORMAT,
        "pypto_version": __version__,
        "op": "conv_backward_input",
        **case.as_dict(),
        "seed": seed,
        "dist": dist,
        # the order pypto's own result (output/pypto) was summed in: the order in force now
        "sum_order": get_sum_order(case.dtype),
        "byte_order": "little",
        "files": files,
    }
    written = {f"{FILES[name][0]}.{ext}" for name in FILES for ext in ("bin", "npy")}
    try:
        removed = _remove_stale(directory, written)
        for sub in ("input", "output"):
            os.makedirs(os.path.join(directory, sub), exist_ok=True)
        for name, array in (
            ("grad_output", dy),
            ("weight", w),
            ("golden", golden),
            ("pypto", reference),
        ):
            files[name].update(_write(directory, FILES[name][0], array, dtypes[name]))
        # last, and whole or not at all: a manifest only ever describes files that are there
        with atomic_writer(os.path.join(directory, MANIFEST)) as f:
            f.write(_json_text(manifest))
    except OSError as exc:
        raise _error(f"cannot write the case to {directory}: {exc}") from None
    return manifest, removed


def _json_text(manifest):
    """Indented JSON with each list of numbers on one line."""
    text = json.dumps(manifest, indent=2)
    return (
        re.sub(r"\[([^\[\]{}\"]*)\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
        + "\n"
    )


# --- reading -----------------------------------------------------------------------------------
def _ints(manifest, key, length, where):
    value = manifest.get(key)
    if (
        not isinstance(value, list)
        or len(value) != length
        or not all(type(v) is int for v in value)
    ):
        raise _error(f"{where}: '{key}' must be a list of {length} ints, but is {show(value)}")
    return value


def _relative_name(value, where):
    """A file name of the manifest: a relative path that stays inside the case folder (a
    hand-edited manifest must not make compare open /etc/passwd or ../../x)."""
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise _error(f"{where} must be a file name (a string), but is {show(value)}")
    norm = os.path.normpath(value)
    if (
        os.path.isabs(value)
        or norm in (os.curdir, os.pardir)
        or norm.startswith(os.pardir + os.sep)
    ):
        raise _error(
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
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise _error(f"{path}: format {show(found)}, expected {FORMAT!r}")
    dtype = manifest.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPE_NAMES:
        raise _error(f"{path}: 'dtype' must be 'fp16' or 'bf16', but is {show(dtype)}")
    for key, (ok, what) in _TOP_KEYS.items():
        if key in manifest and not ok(manifest[key]):
            raise _error(f"{path}: '{key}' must be {what}, but is {show(manifest[key])}")
    tiles = manifest.get("tiles")
    if not isinstance(tiles, dict):
        raise _error(f"{path}: 'tiles' must be an object with l1, l0 and vec")
    vec = tiles.get("vec")
    if not isinstance(vec, list) or not all(type(v) is int for v in vec):
        raise _error(f"{path}: tiles 'vec' must be a list of ints, but is {show(vec)}")
    if "order" in tiles and not isinstance(tiles["order"], str):
        raise _error(f"{path}: tiles 'order' must be a string, but is {show(tiles['order'])}")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise _error(f"{path}: 'files' must be an object")
    for name, entry in files.items():
        if name not in FILES and name != "actual":
            continue  # not read: a harness's own entry
        if not isinstance(entry, dict):
            raise _error(f"{path}: files '{name}' must be an object, but is {show(entry)}")
        for key, (ok, what) in _ENTRY_KEYS.items():
            if key not in entry:
                continue
            where = f"{path}: files '{name}' '{key}'"
            if ok is None:
                _relative_name(entry[key], where)
            elif not ok(entry[key]):
                raise _error(f"{where} must be {what}, but is {show(entry[key])}")


def read_case(directory):
    """(Case, manifest) from DIR/manifest.json, every field type-checked and the problem
    validated by the op's rules."""
    path = os.path.join(directory, MANIFEST)
    if not os.path.lexists(path):
        raise _error(f"{path} not found: is {directory} a case written by `pypto golden`?")
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
        itemsize = np.dtype(_BIN_DTYPES[dtype_name]).itemsize
        expected = math.prod(shape) * itemsize
        with open_regular(path, "the data file") as f:
            found = os.fstat(f.fileno()).st_size
            if found != expected:
                raise _error(
                    f"{path} has {found} bytes, expected {expected} ({dtype_name} "
                    f"{list(shape)} = {math.prod(shape)} elements x {itemsize} bytes)"
                    + (_size_hint(found, expected) if itemsize == 2 else "")
                )
            data = np.empty(math.prod(shape), dtype=_BIN_DTYPES[dtype_name])
            raw = memoryview(data).cast("B")
            try:
                got = f.readinto(raw)
            except OSError as exc:
                raise _error(f"cannot read {path}: {exc}") from None
        if got != expected:
            raise _error(f"cannot read {path}: {got} of its {expected} bytes (it changed?)")
        if sha256 is not None and hashlib.sha256(raw).hexdigest() != sha256:
            raise _error(
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
        raise _error(f"{path} holds {dt} data; expected {want} ({dtype_name})")
    if list(found_shape) != list(shape):
        raise _error(f"{path} has shape {list(found_shape)}, expected {list(shape)}")
    check_npy_bytes(path, found_shape, dt, held)
    count = math.prod(found_shape)
    try:
        with open_regular(path, "the .npy file") as f:
            f.seek(offset)
            data = np.fromfile(f, dtype=dt, count=count)
    except (OSError, ValueError) as exc:
        raise _error(f"cannot read {path} as .npy: {exc}") from None
    if data.size != count:
        raise _error(
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
        raise _error(f"{os.path.join(directory, MANIFEST)}: 'files' must be an object")
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
        arrays.append(
            read_array(
                os.path.join(directory, relative),
                dtype_name,
                shapes[name],
                case,
                entry.get("bin_sha256"),
            )
        )
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


def read_result(directory, case, path):
    """The kernel's dx from ``path`` (.bin or .npy), checked against the case's dtype/shape."""
    return read_array(resolve_actual(directory, path), case.dtype_name, case.input_size, case)
