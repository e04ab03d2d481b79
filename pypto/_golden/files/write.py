"""Writing a golden case: the inputs, the golden, pypto's result, then the manifest, last."""

import json
import math
import os
import re

import numpy as np

from ..._core.fileio import (
    atomic_writer,
    file_sha256,
)
from ..._core.options import get_sum_order
from ..._version import __version__
from .dims import NCHW, array_in, check_layout, shape_in
from .layout import (
    ACTUAL,
    BIN_DTYPES,
    FILES,
    FORMAT,
    FORMAT_LAID_OUT,
    MANIFEST,
    ROLES,
    case_error,
    check_path,
)

__all__ = ["write_case", "check_case_folder"]


def _file_entry(stem, dtype_name, shape, note, layout):
    """A file's manifest entry; ``shape`` is NCHW, the entry's shape is ``layout``'s."""
    itemsize = np.dtype(BIN_DTYPES[dtype_name]).itemsize
    return {
        "bin": stem + ".bin",
        "npy": stem + ".npy",
        "dtype": dtype_name,
        "layout": layout,
        "shape": shape_in(shape, layout),
        "bytes": math.prod(shape) * itemsize,
        "note": note,
    }


def _write(directory, stem, array, dtype_name):
    """Write ``stem``.bin and .npy; their sha256 digests (of what is on disk)."""
    data = np.ascontiguousarray(array)
    if dtype_name == "bf16":
        data = data.view(np.uint16)
    data = data.astype(BIN_DTYPES[dtype_name], copy=False)
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
        raise case_error(f"cannot write the case to {directory}: it is a file, not a folder")
    try:
        found = _case_files(directory) if os.path.isdir(directory) else []
    except OSError as exc:
        raise case_error(f"cannot write the case to {directory}: {exc}") from None
    if found and not replace:
        shown = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
        raise case_error(
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


def write_case(directory, case, dy, w, golden, reference, seed, dist, replace=False, layouts=None):
    """Write a case's inputs, golden, pypto's result and manifest: (manifest, the old files of
    output/ that were deleted). ``replace``: the folder may hold a case (see
    :func:`check_case_folder`); its old kernel results are deleted. ``layouts``: the layout
    (``dims.LAYOUTS``) of "grad_output", "weight" and "grad_input" (dx: the golden, pypto's
    result and the kernel's), each NCHW when not given; the arrays are NCHW and are written
    transposed, and each file's entry records its layout."""
    check_case_folder(directory, replace)
    layouts = {
        role: check_layout((layouts or {}).get(role, NCHW), f"the layout of {role}")
        for role in ("grad_output", "weight", "grad_input")
    }
    dt = case.dtype_name
    shapes = {
        "grad_output": case.grad_output_shape,
        "weight": case.weight_shape,
        "golden": case.input_size,
        "pypto": case.input_size,
    }
    dtypes = {"grad_output": dt, "weight": dt, "golden": "float64", "pypto": dt}
    files = {
        name: _file_entry(stem, dtypes[name], shapes[name], note, layouts[ROLES[name]])
        for name, (stem, note) in FILES.items()
    }
    files["actual"] = _file_entry(
        ACTUAL[0], dt, case.input_size, ACTUAL[1], layouts[ROLES["actual"]]
    )
    del files["actual"]["npy"]
    files["actual"]["npy_also_read"] = ACTUAL[0] + ".npy"
    manifest = {
        "format": FORMAT if set(layouts.values()) == {NCHW} else FORMAT_LAID_OUT,
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
            laid_out = array_in(array, layouts[ROLES[name]])
            files[name].update(_write(directory, FILES[name][0], laid_out, dtypes[name]))
        # last, and whole or not at all: a manifest only ever describes files that are there
        with atomic_writer(os.path.join(directory, MANIFEST)) as f:
            f.write(_json_text(manifest))
    except OSError as exc:
        raise case_error(f"cannot write the case to {directory}: {exc}") from None
    return manifest, removed


def _json_text(manifest):
    """Indented JSON with each list of numbers on one line."""
    text = json.dumps(manifest, indent=2)
    return (
        re.sub(r"\[([^\[\]{}\"]*)\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
        + "\n"
    )
