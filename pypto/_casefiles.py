"""The files of a golden case: the layout ``pypto golden`` writes and ``pypto compare`` reads.

    DIR/manifest.json             shapes, dtypes, attributes, tiles, seed, files, pypto version
    DIR/input/grad_output.bin     dy  [N, Cout, Hout, Wout]   fp16 / bf16
    DIR/input/weight.bin          w   [Cout, Cin, Kh, Kw]     fp16 / bf16
    DIR/output/golden.bin         dx  [N, Cin, Hin, Win]      float64 (the golden, unrounded)
    DIR/output/pypto.bin          dx                          fp16 / bf16 (pypto's own result)
    DIR/output/output.bin         dx                          fp16 / bf16: the kernel writes it

Every ``.bin`` is raw little-endian C-order data as NumPy's ``tofile`` writes it (bf16 as its
16-bit patterns: read it as uint16 or ``ml_dtypes.bfloat16``); each has a ``.npy`` twin (bf16
as uint16). Shapes and dtypes travel in the manifest. Every fault in a file (missing, wrong
size, wrong dtype or shape, bad manifest) is a PyptoError naming the file and what was expected.
"""

import json
import math
import os
import re

import numpy as np

from ._golden import DTYPE_NAMES, make_case
from ._version import __version__
from .error import FeError

__all__ = ["write_case", "read_case", "read_inputs", "read_result", "resolve_actual", "FORMAT",
           "FILES", "ACTUAL"]

FORMAT = "pypto-golden/1"
MANIFEST = "manifest.json"
# name: (path without extension, what it holds)
FILES = {
    "grad_output": ("input/grad_output", "dy, the kernel's input"),
    "weight": ("input/weight", "w, the kernel's input"),
    "golden": ("output/golden", "dx in float64 from the fp16/bf16 inputs (exact products, "
                                "float64 sums), not rounded"),
    "pypto": ("output/pypto", "pypto's own dx: fp32 accumulation, one round-to-nearest-even"),
}
ACTUAL = ("output/output", "dx from the kernel under test: write it here")
_BIN_DTYPES = {"fp16": "<f2", "bf16": "<u2", "float64": "<f8"}


def _error(text):
    return FeError(ValueError(text))


def _file_entry(stem, dtype_name, shape, note):
    itemsize = np.dtype(_BIN_DTYPES[dtype_name]).itemsize
    return {"bin": stem + ".bin", "npy": stem + ".npy", "dtype": dtype_name,
            "shape": list(shape), "bytes": math.prod(shape) * itemsize, "note": note}


def _write(directory, stem, array, dtype_name):
    data = np.ascontiguousarray(array)
    if dtype_name == "bf16":
        data = data.view(np.uint16)
    data = data.astype(_BIN_DTYPES[dtype_name], copy=False)
    data.tofile(os.path.join(directory, stem + ".bin"))
    np.save(os.path.join(directory, stem + ".npy"), data, allow_pickle=False)


def write_case(directory, case, dy, w, golden, reference, seed, dist):
    """Write a case's inputs, golden, pypto's result and manifest; returns the manifest."""
    dt = case.dtype_name
    shapes = {"grad_output": case.grad_output_shape, "weight": case.weight_shape,
              "golden": case.input_size, "pypto": case.input_size}
    dtypes = {"grad_output": dt, "weight": dt, "golden": "float64", "pypto": dt}
    files = {name: _file_entry(stem, dtypes[name], shapes[name], note)
             for name, (stem, note) in FILES.items()}
    files["actual"] = _file_entry(ACTUAL[0], dt, case.input_size, ACTUAL[1])
    del files["actual"]["npy"]
    files["actual"]["npy_also_read"] = ACTUAL[0] + ".npy"
    manifest = {
        "format": FORMAT, "pypto_version": __version__, "op": "conv_backward_input",
        **case.as_dict(),
        "seed": seed, "dist": dist, "byte_order": "little", "files": files,
    }
    try:
        for sub in ("input", "output"):
            os.makedirs(os.path.join(directory, sub), exist_ok=True)
        for name, array in (("grad_output", dy), ("weight", w), ("golden", golden),
                            ("pypto", reference)):
            _write(directory, FILES[name][0], array, dtypes[name])
        temporary = os.path.join(directory, MANIFEST + ".tmp")
        with open(temporary, "w") as f:
            f.write(_json_text(manifest))
        os.replace(temporary, os.path.join(directory, MANIFEST))
    except OSError as exc:
        raise _error(f"cannot write the case to {directory}: {exc}") from None
    return manifest


def _json_text(manifest):
    """Indented JSON with each list of numbers on one line."""
    text = json.dumps(manifest, indent=2)
    return re.sub(r"\[([^\[\]{}\"]*)\]", lambda m: "[" + " ".join(m.group(1).split()) + "]",
                  text) + "\n"


# --- reading -----------------------------------------------------------------------------------
def _ints(manifest, key, length, where):
    value = manifest.get(key)
    if (not isinstance(value, list) or len(value) != length
            or not all(type(v) is int for v in value)):
        raise _error(f"{where}: '{key}' must be a list of {length} ints, but is {value!r}")
    return value


def read_case(directory):
    """(Case, manifest) from DIR/manifest.json, validated by the op's rules."""
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise _error(f"{path} not found: is {directory} a case written by `pypto golden`?") \
            from None
    except (OSError, ValueError) as exc:
        raise _error(f"cannot read {path}: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise _error(f"{path}: format {found!r}, expected {FORMAT!r}")
    dtype = manifest.get("dtype")
    if dtype not in DTYPE_NAMES:
        raise _error(f"{path}: 'dtype' must be 'fp16' or 'bf16', but is {dtype!r}")
    tiles = manifest.get("tiles")
    if not isinstance(tiles, dict):
        raise _error(f"{path}: 'tiles' must be an object with l1, l0 and vec")
    l1, l0 = _ints(tiles, "l1", 3, path + " tiles"), _ints(tiles, "l0", 3, path + " tiles")
    vec = tiles.get("vec")
    if not isinstance(vec, list) or not all(type(v) is int for v in vec):
        raise _error(f"{path}: tiles 'vec' must be a list of ints, but is {vec!r}")
    case = make_case(_ints(manifest, "grad_output", 4, path), _ints(manifest, "weight", 4, path),
                     _ints(manifest, "input_size", 4, path), dtype,
                     _ints(manifest, "strides", 2, path), _ints(manifest, "paddings", 4, path),
                     _ints(manifest, "dilations", 2, path), tiles=(l1, l0), vec=vec)
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


def read_array(path, dtype_name, shape, case):
    """The array in ``path`` (.npy by its header, anything else as a raw .bin of
    ``dtype_name`` and ``shape``); bf16 comes back as ml_dtypes.bfloat16."""
    if path.endswith(".npy"):
        data = _read_npy(path, dtype_name, shape)
    else:
        itemsize = np.dtype(_BIN_DTYPES[dtype_name]).itemsize
        expected = math.prod(shape) * itemsize
        try:
            found = os.path.getsize(path)
        except OSError as exc:
            raise _error(f"cannot read {path}: {exc}") from None
        if found != expected:
            raise _error(f"{path} has {found} bytes, expected {expected} ({dtype_name} "
                         f"{list(shape)} = {math.prod(shape)} elements x {itemsize} bytes)"
                         + (_size_hint(found, expected) if itemsize == 2 else ""))
        try:
            data = np.fromfile(path, dtype=_BIN_DTYPES[dtype_name]).reshape(shape)
        except (OSError, ValueError) as exc:
            raise _error(f"cannot read {path}: {exc}") from None
    data = data.astype(data.dtype.newbyteorder("="), copy=False)
    if dtype_name == "bf16":
        return data.view(case.np_dtype)
    return data


def _read_npy(path, dtype_name, shape):
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise _error(f"cannot read {path} as .npy: {exc}") from None
    dt = data.dtype
    if dtype_name == "fp16":
        ok = dt.kind == "f" and dt.itemsize == 2
        want = "float16"
    elif dtype_name == "bf16":
        ok = dt.itemsize == 2 and (dt.kind in "uV" or dt.name == "bfloat16")
        want = "bfloat16 (as uint16, void16 or ml_dtypes.bfloat16)"
    else:
        ok = dt.kind == "f"
        want = "float"
    if not ok:
        raise _error(f"{path} holds {dt} data; expected {want} ({dtype_name})")
    if list(data.shape) != list(shape):
        raise _error(f"{path} has shape {list(data.shape)}, expected {list(shape)}")
    if dtype_name == "bf16":
        data = np.ascontiguousarray(data).view(f"{dt.byteorder if dt.byteorder in '<>' else '='}u2")
    return data.astype(np.float64) if dtype_name == "float64" else data


def read_inputs(directory, case, manifest):
    """(dy, w, golden, pypto's result) of a case, by the manifest's file names."""
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise _error(f"{os.path.join(directory, MANIFEST)}: 'files' must be an object")
    shapes = {"grad_output": case.grad_output_shape, "weight": case.weight_shape,
              "golden": case.input_size, "pypto": case.input_size}
    arrays = []
    for name in ("grad_output", "weight", "golden", "pypto"):
        entry = files.get(name)
        stem = FILES[name][0]
        relative = entry.get("bin", stem + ".bin") if isinstance(entry, dict) else stem + ".bin"
        dtype_name = "float64" if name == "golden" else case.dtype_name
        arrays.append(read_array(os.path.join(directory, relative), dtype_name, shapes[name],
                                 case))
    return tuple(arrays)


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
