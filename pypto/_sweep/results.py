"""A sweep's rows on disk: results.jsonl (appended and flushed row by row), merged, counted,
and written as CSV or xlsx.

    DIR/results.jsonl                  the rows of an unsharded sweep, one JSON object a line
    DIR/results.shard-I-of-N.jsonl     the rows of shard I (0-based) of N
    DIR/verdicts.jsonl                 the rows of ``pypto sweep --judge DIR``

A row is written whole with one ``write`` and flushed at once, so an interrupted sweep loses
at most the line being written; a torn last line (no newline, or not JSON) is ignored when the
file is read, and cut off before the next append.
"""

import glob
import json
import os

from .._core.fileio import parse_json, read_text, show
from .._golden.calls import CALL_COLUMNS
from ..error import FeError
from .unit import ADDED, LEADING, TRAILING, VOLATILE

__all__ = [
    "results_path",
    "ResultsFile",
    "read_rows",
    "merge",
    "summary",
    "summary_text",
    "run_seconds",
    "write_table",
    "identity",
    "check_row",
    "VERDICTS",
]

VERDICTS = "verdicts.jsonl"
STATUSES = ("pass", "fail", "refused", "error", "timeout")


def results_path(out_dir, shard=None):
    if shard is None:
        return os.path.join(out_dir, "results.jsonl")
    index, count = shard
    return os.path.join(out_dir, f"results.shard-{index}-of-{count}.jsonl")


def read_rows(path):
    """The rows of a results file, in order; a torn last line is left out. A bad line
    elsewhere (not JSON, or not a row: :func:`check_row`) is a PyptoError naming the file and
    line; so is a results file that is not a regular file."""
    if not os.path.lexists(path):
        return []
    text = read_text(path, "the results file")
    lines = text.split("\n")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if number == len(lines):  # no newline after it: the torn line of an interrupted write
            continue
        row = parse_json(line, f"{path}:{number}: not a result row")
        if isinstance(row, dict):  # a row of an older pypto: what its missing keys meant
            row = {**ADDED, **row}
        check_row(row, f"{path}:{number}")
        rows.append(row)
    return rows


def _is_list_or_none(value):
    return value is None or isinstance(value, list)


def _is_verdicts(value):
    return isinstance(value, dict) and all(
        isinstance(v, dict)
        and isinstance(v.get("passed"), bool)
        and isinstance(v.get("detail"), str)
        and (v.get("warning") is None or isinstance(v.get("warning"), str))
        for v in value.values()
    )


def _is_tasks(value):
    return isinstance(value, list) and all(
        isinstance(t, dict) and {"where", "outside", "elements", "max_ulp"} <= set(t) for t in value
    )


# what merge, summary and the table read of a row, and how (every key a sweep writes is there)
_ROW_CHECKS = {
    "case_id": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "status": (lambda v: v in STATUSES, "one of " + ", ".join(STATUSES)),
    "rule": (lambda v: v is None or isinstance(v, str), "a rule id or null"),
    "verdicts": (_is_verdicts, "an object of verdicts (passed, detail, warning)"),
    "failing_tasks": (_is_tasks, "a list of tasks (where, outside, elements, max_ulp)"),
    **{
        key: (_is_list_or_none, "a list or null")
        for key in ("grad_output", "weight", "grad_input", "strides", "paddings", "dilations")
    },
}


def check_row(row, where):
    """A PyptoError naming ``where`` unless ``row`` is a sweep's result row: an object with
    every key the sweep writes, those that are read typed (``_ROW_CHECKS``)."""
    if not isinstance(row, dict):
        raise FeError(ValueError(f"{where}: not a result row (a {type(row).__name__})"))
    for key in (*LEADING, *CALL_COLUMNS, "verdicts", *TRAILING):
        if key not in row:
            raise FeError(ValueError(f"{where}: not a result row (no {key!r})"))
    for key, (ok, what) in _ROW_CHECKS.items():
        if not ok(row[key]):
            raise FeError(
                ValueError(
                    f"{where}: not a result row ({key!r} must be {what}, not {show(row[key])})"
                )
            )


class ResultsFile:
    """An open results file: :meth:`append` writes a row whole and flushes it."""

    def __init__(self, path):
        self.path = path
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            self._cut_torn_line()
            self._file = open(path, "a", encoding="utf-8")
        except OSError as exc:
            raise FeError(OSError(f"cannot write {path}: {exc}")) from None

    def _cut_torn_line(self):
        """Cut a last line without its newline (an interrupted write), so the next row starts
        on a line of its own."""
        try:
            with open(self.path, "rb+") as f:
                data = f.read()
                if data and not data.endswith(b"\n"):
                    f.truncate(data.rfind(b"\n") + 1)
        except FileNotFoundError:
            pass

    def append(self, row):
        self._file.write(json.dumps(row, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _row_files(directory):
    return sorted(glob.glob(os.path.join(directory, "results*.jsonl")))


def merge(directories):
    """Every row of the sweep folders (results.jsonl and shard files), one per case id: a row
    of verdicts.jsonl (``--judge``) replaces the case's golden row. In case-id order."""
    by_id = {}
    for directory in directories:
        if not os.path.isdir(directory):
            raise FeError(ValueError(f"--merge {directory}: not a folder"))
        files = _row_files(directory)
        if not files and not os.path.exists(os.path.join(directory, VERDICTS)):
            raise FeError(
                ValueError(f"--merge {directory}: no results*.jsonl (is it a sweep's --out?)")
            )
        for path in files:
            for row in read_rows(path):
                by_id.setdefault(row["case_id"], row)
        for row in read_rows(os.path.join(directory, VERDICTS)):
            by_id[row["case_id"]] = row
    return [by_id[key] for key in sorted(by_id)]


def identity(row):
    """The row less its time and place (what two runs of a case must agree on)."""
    return {key: value for key, value in row.items() if key not in VOLATILE}


def run_seconds(rows):
    """The wall time of the sweep runs that wrote ``rows``: per run (its "started"), the
    "elapsed" of its last row, added up (rows without them count nothing)."""
    runs = {}
    for row in rows:
        if row.get("started") is not None and row.get("elapsed") is not None:
            runs[row["started"]] = max(runs.get(row["started"], 0.0), row["elapsed"])
    return sum(runs.values())


def summary(rows, seconds=None):
    counts = {"cases": len(rows)}
    for status in STATUSES:
        counts[status] = sum(row["status"] == status for row in rows)
    counts["seconds"] = seconds
    rules = {}
    for row in rows:
        if row["status"] == "refused":
            rules[row["rule"]] = rules.get(row["rule"], 0) + 1
    counts["rules"] = dict(sorted(rules.items()))
    return counts


def summary_text(counts):
    header = ("cases", "passed", "failed", "refused", "errors", "timeouts", "seconds")
    values = (
        counts["cases"],
        counts["pass"],
        counts["fail"],
        counts["refused"],
        counts["error"],
        counts["timeout"],
        "" if counts["seconds"] is None else f"{counts['seconds']:.1f}",
    )
    widths = [max(len(h), len(str(v))) for h, v in zip(header, values)]
    lines = [
        "  ".join(h.rjust(n) for h, n in zip(header, widths)),
        "  ".join(str(v).rjust(n) for v, n in zip(values, widths)),
    ]
    if counts["rules"]:
        lines.append(
            "refused by rule: " + ", ".join(f"{rule} {n}" for rule, n in counts["rules"].items())
        )
    return "\n".join(lines)


def check_table_path(path):
    """Before any work: a .csv or .xlsx path in a writable folder; xlsx needs openpyxl."""
    from .._golden.files import check_path

    check_path(path, "--csv")
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".csv", ".xlsx"):
        raise FeError(ValueError(f"--csv {path}: the table is written as .csv or .xlsx"))
    if ext == ".xlsx":
        try:
            import openpyxl  # noqa: F401
        except ImportError:
            raise FeError(
                ImportError(
                    f"--csv {path}: writing .xlsx needs openpyxl (pip install openpyxl); "
                    f"or write a .csv"
                )
            ) from None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise FeError(OSError(f"cannot write the table {path}: {folder} is not a writable folder"))


# the table's own columns after the leading ones: the tile set of each row, so that the rows of
# a case's "all" tile sets differ visibly (the row holds them in "tiles")
TILE_COLUMNS = ("l1", "l0", "vec")


def _table_row(row):
    """A row with its tiles in TILE_COLUMNS and its lists of ints as a case file writes them
    ("16x144x16", "8x64x56x56": read back by a case file, and no spreadsheet's number)."""
    from .._golden.calls import shape_text

    tiles = row.get("tiles") or {}
    table = {key: shape_text(tiles[key]) if tiles.get(key) else None for key in TILE_COLUMNS}
    size = row.get("input_size")
    return {**row, **table, "input_size": shape_text(size) if size else size}


def write_table(path, rows):
    """The rows as a table: ``_golden/calls``'s CSV (its columns, verdicts in words) with the
    tiles after the leading columns, or the same cells in an xlsx sheet "sweep"."""
    from .._golden.calls import write_table as write_calls_table

    leading = (*LEADING, *TILE_COLUMNS)
    write_calls_table(path, [_table_row(row) for row in rows], leading, TRAILING, sheet="sweep")
