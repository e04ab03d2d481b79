"""One dumped call as a golden case folder (``pypto compare --msprobe DUMP --extract NAME --out
DIR``): the layout ``pypto golden`` writes (``pypto._golden.files``), the dump's grad_output
and weight as the inputs, the float64 golden, pypto's own result, and the dumped grad_input as
``output/output.bin``, the result under test, so that ``pypto compare DIR`` judges it as
``--msprobe`` did."""

import os

import numpy as np

from ..._core.fileio import atomic_writer
from ...error import FeError
from ..files import ACTUAL, write_case
from ..files.layout import BIN_DTYPES
from .tensors import read_call_tensors

__all__ = ["extract_call"]


def extract_call(call, result, directory, replace=False):
    """Write ``call`` (judged: ``result`` is its CompareResult) to ``directory`` as a golden
    case: returns (manifest, the old files of output/ deleted, the path of output.bin). The
    golden and pypto's result are the very arrays ``result`` was judged with. A PyptoError
    when the folder holds a case and ``replace`` is not given, or cannot be written."""
    arrays = read_call_tensors(call)
    case = result.case
    manifest, removed = write_case(
        directory,
        case,
        arrays["grad_output"],
        arrays["weight"],
        result.golden,
        result.reference,
        None,  # no seed: the inputs are the dump's
        f"msprobe dump: {call.api} in {call.dump_json}",
        replace=replace,
    )
    path = os.path.join(directory, ACTUAL[0] + ".bin")
    data = np.ascontiguousarray(result.actual)
    if case.dtype_name == "bf16":
        data = data.view(np.uint16)  # the layout stores bf16 as its 16-bit patterns
    try:
        with atomic_writer(path, "wb") as f:  # after the manifest: newer, so not stale
            data.astype(BIN_DTYPES[case.dtype_name], copy=False).tofile(f)
    except OSError as exc:
        raise FeError(OSError(f"cannot write {path}: {exc}")) from None
    return manifest, removed, path
