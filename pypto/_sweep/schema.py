"""The canonical case every case reader makes: its fields, dtype and distribution names, value
checks, id and seed, and the bound on how many cases one file may expand to.

Shared by pypto's own case files (``cases.py``) and msOpST's (``msopst.py``); neither reader
imports the other's format.
"""

import hashlib
import json

from .._core.environ import getenv
from .._core.fileio import show
from ..error import FeError

__all__ = [
    "canonical",
    "case_id",
    "case_seed",
    "format_text",
    "unreadable",
    "UNREADABLE",
    "CaseFileError",
    "CaseCountError",
    "check_case_count",
    "MAX_CASES_ENV",
    "max_cases",
    "DTYPES",
    "DISTS",
    "int_of",
    "ints_of",
    "number_of",
    "value_range",
    "dtype_of",
    "dist_of",
]

# the dtype names a case file may give, and the name a case keeps
DTYPES = {
    "fp16": "fp16",
    "float16": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
}
DISTS = ("uniform", "normal", "ints", "truncated_normal")
_IDENTITY = (
    "grad_output",
    "weight",
    "input_size",
    "strides",
    "paddings",
    "dilations",
    "groups",
    "dtype",
    "tiles",
    "inputs",
    "seed",
)


# how many cases one case file may expand to (msOpST's cross products, tiles "all"): checked
# before the cases are built, so a few KB cannot ask for millions of them
MAX_CASES_ENV = "PYPTO_SWEEP_MAX_CASES"
DEFAULT_MAX_CASES = 100_000


def max_cases():
    """PYPTO_SWEEP_MAX_CASES (an int >= 1), else DEFAULT_MAX_CASES."""
    text = getenv(MAX_CASES_ENV)
    if text is None or not text.strip():
        return DEFAULT_MAX_CASES
    try:
        limit = int(text.strip())
    except ValueError:
        limit = 0
    if limit < 1:
        raise FeError(ValueError(f"{MAX_CASES_ENV}={text!r}: expected an int >= 1"))
    return limit


def check_case_count(count, where):
    """A CaseCountError when a case file would expand to more than :func:`max_cases` cases."""
    limit = max_cases()
    if count > limit:
        raise CaseCountError(
            where,
            f"the case file expands to {count} cases or more, above the limit of {limit} "
            f"(set {MAX_CASES_ENV} to raise it, or split the file)",
        )


class CaseFileError(FeError):
    """A fault in a case file: the text names the file, the line (or case) and the field."""

    def __init__(self, where, text):
        super().__init__(ValueError(f"{where}: {text}"))


class CaseCountError(CaseFileError):
    """A case file that expands to too many cases: refused whole, never a row per case."""


# --- values ------------------------------------------------------------------------------------
def int_of(value, where, field):
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            pass
    if type(value) is not int:
        raise CaseFileError(where, f"field '{field}' must be an int, but is {show(value)}")
    return value


def ints_of(value, length, where, field):
    """A list of ``length`` ints from a JSON list or a CSV cell ("1,16,5,32", "1x16x5x32",
    "[1, 16, 5, 32]", "1 16 5 32")."""
    if isinstance(value, str):
        text = value.strip().strip("[]()")
        parts = text.replace("x", ",").replace(" ", ",").split(",")
        value = [p for p in parts if p != ""]
    lengths = length if isinstance(length, tuple) else (length,)
    if not isinstance(value, list) or len(value) not in lengths:
        what = " or ".join(str(n) for n in lengths)
        raise CaseFileError(where, f"field '{field}' must be {what} ints, but is {show(value)}")
    return [int_of(v, where, field) for v in value]


def number_of(value, where, field):
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise CaseFileError(where, f"field '{field}' must hold numbers, but holds {show(value)}")
    if abs(value) == float("inf"):
        raise CaseFileError(where, f"field '{field}' must hold finite numbers, not {value}")
    return value


def value_range(value, where, field, ordered=True):
    """[lo, hi] (two finite numbers, lo <= hi when ``ordered``; a normal distribution's
    range is [mean, standard deviation]) from a list or "lo,hi"."""
    if isinstance(value, str):
        value = [p for p in value.strip().strip("[]()").replace(" ", ",").split(",") if p]
    if not isinstance(value, list) or len(value) != 2:
        raise CaseFileError(where, f"field '{field}' must be [lo, hi], but is {show(value)}")
    lo, hi = (number_of(v, where, field) for v in value)
    if ordered and lo > hi:
        raise CaseFileError(where, f"field '{field}' must have lo <= hi, but is {[lo, hi]}")
    return [float(lo), float(hi)]  # 2 and 2.0 are one range (and one case id)


def dtype_of(value, where, field):
    if not isinstance(value, str) or value.strip().lower() not in DTYPES:
        raise CaseFileError(
            where,
            f"field '{field}' must be fp16 or bf16 (float16, bfloat16; fp32 is read and refused "
            f"by the op), but is {show(value)}",
        )
    return DTYPES[value.strip().lower()]


def dist_of(value, where, field):
    if not isinstance(value, str) or value.strip().lower() not in DISTS:
        raise CaseFileError(
            where, f"field '{field}' must be one of {', '.join(DISTS)}, but is {show(value)}"
        )
    return value.strip().lower()


# --- the canonical case ------------------------------------------------------------------------
def _digest(identity):
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def case_id(case):
    """The first 16 hex digits of the sha256 of the case's identity (canonical JSON). The
    layouts count only when a tensor is not NCHW, so NCHW cases keep the ids they always had."""
    identity = {key: case[key] for key in _IDENTITY}
    if case.get("layouts"):
        identity["layouts"] = case["layouts"]
    return _digest(identity)


def case_seed(case):
    """The case's seed, or one derived from its problem (so every host draws the same inputs):
    the id of the case with the suggested tiles and NCHW tensors, so that every tile set and
    layout of one problem gets the same data (a suggested-tiles NCHW case: its own id)."""
    if case.get("unreadable") is not None:
        return None
    if case["seed"] is not None:
        return case["seed"]
    return int(case_id(dict(case, tiles="suggested", layouts=None)), 16) >> 1


def format_text(case):
    """The layouts of a case in a row's "format": "NCHW", "NHWC" (dy, w and dx alike), or the
    data's then the filter's, "NHWC/HWCN"; None for a case that could not be read."""
    if case.get("unreadable") is not None:
        return None
    layouts = case.get("layouts") or {}
    data, weight = layouts.get("grad_input", "NCHW"), layouts.get("weight", "NCHW")
    return data if weight == data else f"{data}/{weight}"


# the rule of a refused row whose case the case file does not let pypto read
UNREADABLE = "unreadable"


def unreadable(raw, error, name=None, source=None):
    """The case of a line (or msOpST case or sub-case) pypto cannot read: it runs nothing and
    becomes a refused row (rule UNREADABLE) with ``error``'s text, so one bad case never stops
    a file. Its id is a digest of ``raw`` (what the file holds for it, JSON-ready)."""
    case = {key: None for key in ("id", *_IDENTITY, "layouts")}
    case.update(
        name=None if name is None else str(name),
        source=source,
        unreadable=str(error),
        id=_digest({"unreadable": raw}),
    )
    return case


def canonical(
    grad_output,
    weight,
    input_size=None,
    strides=(1, 1),
    paddings=(0, 0, 0, 0),
    dilations=(1, 1),
    groups=1,
    dtype="fp16",
    tiles="suggested",
    inputs=None,
    seed=None,
    name=None,
    source=None,
    layouts=None,
):
    """A canonical case dict (values already checked), with its id. ``layouts``: the layout
    of "grad_output", "weight" and "grad_input" when one is not NCHW (the files are written
    so); the shapes are NCHW whatever the layouts."""
    default = {"dist": "uniform", "range": None}
    case = {
        "id": None,
        "name": name,
        "source": source,
        "grad_output": list(grad_output),
        "weight": list(weight),
        "input_size": None if input_size is None else list(input_size),
        "strides": list(strides),
        "paddings": list(paddings),
        "dilations": list(dilations),
        "groups": groups,
        "dtype": dtype,
        "tiles": tiles,
        "inputs": inputs or {"grad_output": dict(default), "weight": dict(default)},
        "seed": seed,
        "layouts": dict(layouts) if layouts and set(layouts.values()) != {"NCHW"} else None,
    }
    case["id"] = case_id(case)
    return case
