"""The golden case folder's layout: the files, their dtypes, the manifest's format, and the
checks on a path given for one (see the package docstring for the layout itself)."""

from ..._core.fileio import (
    show,
)
from ...error import FeError

__all__ = [
    "FORMAT",
    "FORMAT_LAID_OUT",
    "MANIFEST",
    "FILES",
    "ACTUAL",
    "BIN_DTYPES",
    "ROLES",
    "check_path",
    "case_error",
]

FORMAT = "pypto-golden/1"
# a case with a file in a layout other than NCHW (its entry's "layout"): a reader that knows
# only FORMAT must refuse it, not read NHWC data as NCHW
FORMAT_LAID_OUT = "pypto-golden/2"
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
# the tensor each file holds (whose layout it is written in): dy, w, or dx
ROLES = {
    "grad_output": "grad_output",
    "weight": "weight",
    "golden": "grad_input",
    "pypto": "grad_input",
    "actual": "grad_input",
}
BIN_DTYPES = {"fp16": "<f2", "bf16": "<u2", "float64": "<f8"}


def case_error(text):
    """A FeError about a case's files (the text names the file and what was expected)."""
    return FeError(ValueError(text))


def check_path(value, what, folder=False):
    """``value`` unless it is empty or blank: an empty path would silently mean the current
    folder (or a hidden '.png' there)."""
    hint = "a folder (. for the current one)" if folder else "a file name"
    if not isinstance(value, str) or not value.strip():
        raise case_error(f"{what} is {show(value)}, an empty or blank path: give {hint}")
    if "\0" in value:
        raise case_error(f"{what} is {show(value)}, which holds a NUL character: give {hint}")
    return value
