"""Judged conv2d backward calls as table rows, and the table as JSON or CSV.

``pypto compare --msprobe`` (:mod:`pypto._golden.msprobe`) and ``pypto.torch.crosscheck``
each judge a list of conv2d backward calls as ``pypto.testing.compare`` does
(:func:`pypto._golden.judge.judge_case`) and keep one row (a dict) per call. A row is the
tool's own leading keys (its identity and "status": msprobe dump, api, forward,
parameters_from, status; crosscheck call, status, rule), then the keys of :data:`CALL_COLUMNS`
with ``verdicts`` after ``passed`` and ``tiles`` last, then the tool's own trailing keys
(crosscheck: seconds). :func:`new_row` makes one, status "skipped";
``row.update(judged(result))`` fills in what a CompareResult found.

A CSV table is the tool's leading columns, :data:`CALL_COLUMNS`, msprobe's accuracy columns
(:data:`METRIC_COLUMNS`, :mod:`pypto._golden.msprobe_metrics`: against the float64 golden), a
verdict column ("pass", "FAIL" or empty) and a detail column per standard, then the tool's
trailing columns; :func:`write_table` writes the same cells as .xlsx. What the tools' tables
differ in, and their tests pin, is a parameter of :func:`write_csv`: the name of a standard's
verdict column and how a list of ints (strides, paddings, dilations) is written. A row written
before a column existed (a sweep's results file) has an empty cell there.
"""

import csv
import json
import math
import os

from .._core.fileio import atomic_writer
from ..error import FeError
from .accuracy import STANDARDS, json_ready
from .msprobe_metrics import COLUMNS as METRIC_COLUMNS
from .msprobe_metrics import msprobe_metrics

__all__ = [
    "CALL_COLUMNS",
    "METRIC_COLUMNS",
    "new_row",
    "judged",
    "json_row",
    "counts",
    "failing_standards",
    "number",
    "regions_text",
    "shape_text",
    "bracketed",
    "spaced",
    "csv_columns",
    "write_csv",
    "write_table",
    "check_report_path",
    "check_table_path",
    "write_json",
]

# the CSV columns of a call, between the tool's leading and the verdict columns
CALL_COLUMNS = (
    "reason",
    "dtype",
    "grad_output",
    "weight",
    "grad_input",
    "strides",
    "paddings",
    "dilations",
    "groups",
    "standard",
    "passed",
    "max_ulp",
    "outside_bound",
    "elements",
    "failing_tasks",
)
_AFTER_PASSED = CALL_COLUMNS.index("passed") + 1
# a row's keys between the tool's leading and trailing ones: the CSV's, verdicts and tiles
_ROW_KEYS = (
    *CALL_COLUMNS[:_AFTER_PASSED],
    "verdicts",
    *CALL_COLUMNS[_AFTER_PASSED:],
    *METRIC_COLUMNS,
    "tiles",
)


# --- rows --------------------------------------------------------------------------------------
def new_row(leading, trailing=None, **known):
    """A call's row before it is judged: ``leading`` (a dict: the tool's identity keys and
    "status", "skipped" until judged), the keys of a call (those given in ``known``; verdicts
    {}, failing_tasks [], the others None), then ``trailing`` (a dict)."""
    unknown = sorted(set(known) - set(_ROW_KEYS))
    if unknown:
        raise TypeError(f"new_row: not a key of a call's row: {', '.join(unknown)}")
    empty = {"verdicts": {}, "failing_tasks": []}
    row = dict(leading)
    row.update({key: known[key] if key in known else empty.get(key) for key in _ROW_KEYS})
    row.update(trailing or {})
    return row


def _task(loc, n, b, m, outside, elements, max_ulp):
    """A failing task (image, channel block, M tile) of the localisation, as a row's entry,
    with its regions (16-channel blocks by row bands: ``Localisation.task_regions``); the image
    by the caller's index (``Localisation.image_id``)."""
    image = loc.image_id(n)
    return {
        "image": image,
        "channel_block": b,
        "channels": list(loc.block_channels(b)),
        "m_tile": m,
        "rows": list(loc.tile_rows(m)),
        "outside": outside,
        "elements": elements,
        "max_ulp": max_ulp,
        "where": f"image {image}, {loc.block_name(b)}, {loc.tile_name(m)}",
        "regions": [r.as_dict() for r in loc.task_regions(n, b, m)],
    }


def judged(result):
    """What a call's ``pypto.testing.CompareResult`` gives its row (``row.update(...)``):
    status, passed, every standard's verdict with its numbers, max ulp, elements outside the
    fp32-accumulation bound, the element count, the failing tasks (most outside first, each
    with its regions), msprobe's columns against the golden and the tiles (``l1``, ``l0``,
    ``vec`` and the task ``grid`` of the localisation). Floats as they are: :func:`json_row`
    makes them JSON-ready."""
    loc = result.localisation
    return {
        "status": "pass" if result.passed else "fail",
        "passed": bool(result.passed),
        "verdicts": {sid: v.as_dict() for sid, v in result.verdicts.items()},
        "max_ulp": float(result.metrics.max_ulp),
        "outside_bound": loc.outside_count,
        "elements": int(result.golden.size),
        "failing_tasks": [_task(loc, *task) for task in loc.failing_tasks()],
        **msprobe_metrics(result.actual, result.golden),
        "tiles": {
            "l1": list(result.case.l1),
            "l0": list(result.case.l0),
            "vec": list(result.case.vec),
            "grid": loc.grid_dict(),
        },
    }


def json_row(row):
    """``row`` for JSON, which has no inf or nan: those as the strings "inf", "-inf", "nan",
    also inside its dicts and the dicts of its lists."""

    def ready(v):
        return json_ready(v) if isinstance(v, (dict, float)) else v

    return {k: [ready(x) for x in v] if isinstance(v, list) else ready(v) for k, v in row.items()}


def counts(rows):
    """{"calls", "judged", "passed", "failed", "skipped"}: how many rows, how many judged
    (status "pass" or "fail"), passed, failed and skipped."""
    judged_rows = [r for r in rows if r["status"] in ("pass", "fail")]
    failed = sum(r["status"] == "fail" for r in judged_rows)
    return {
        "calls": len(rows),
        "judged": len(judged_rows),
        "passed": len(judged_rows) - failed,
        "failed": failed,
        "skipped": len(rows) - len(judged_rows),
    }


def failing_standards(row):
    """The standards whose verdict on the row's call fails, in the row's order."""
    return [sid for sid, v in row["verdicts"].items() if not v["passed"]]


def number(value):
    """A number of a row (possibly JSON-ready: "inf", "nan") in 3 significant digits."""
    return value if isinstance(value, str) else f"{value:.3g}"


# --- cells -------------------------------------------------------------------------------------
def shape_text(shape):
    """[2, 16, 8, 8] -> "2x16x8x8"."""
    return "x".join(str(v) for v in shape)


def bracketed(values):
    """[2, 1] -> "[2,1]"."""
    return "[" + ",".join(str(v) for v in values) + "]"


def spaced(values):
    """[2, 1] -> "2 1"."""
    return " ".join(str(v) for v in values)


_SHAPES = ("grad_output", "weight", "grad_input")
_INT_LISTS = ("strides", "paddings", "dilations", "images")  # images: crosscheck's


def _cell(row, column, int_list):
    value = row.get(column)  # None in a row written before the column existed
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if column in _SHAPES:
        return shape_text(value)
    if column in _INT_LISTS and not isinstance(value, str):  # images may be "all"
        return int_list(value)
    if column == "failing_tasks":
        return "; ".join(
            f"{t['where']}: {t['outside']} of {t['elements']} outside, max "
            f"{number(t['max_ulp'])} ulp{_regions_text(t)}"
            for t in value
        )
    return value


def regions_text(row, shown=3):
    """ "image 1, channels 16-31, rows 8-11 (1534 of 1536 outside); ..." of the regions of a
    row's failing tasks, the first ``shown`` of them, and how many more."""
    regions = [r for t in row["failing_tasks"] for r in t.get("regions", ())]
    text = "; ".join(
        f"{r['where']} ({r['outside']} of {r['elements']} outside)" for r in regions[:shown]
    )
    more = len(regions) - shown
    return text + (f"; and {more} more" if more > 0 else "")


def _regions_text(task):
    """ " (regions: channels 16-31 rows 8-11 1534/1536, ...)" of a failing task's entry."""
    regions = task.get("regions")  # none in a row written before regions existed
    if not regions:
        return ""
    return (
        " (regions: "
        + ", ".join(
            f"channels {r['channels'][0]}-{r['channels'][1]} rows {r['rows'][0]}-{r['rows'][1]} "
            f"{r['outside']}/{r['elements']}"
            for r in regions
        )
        + ")"
    )


def _verdict_cells(verdict):
    if verdict is None:
        return ["", ""]
    warning = f"; warning: {verdict['warning']}" if verdict["warning"] else ""
    return ["pass" if verdict["passed"] else "FAIL", verdict["detail"] + warning]


# --- the table as a file -----------------------------------------------------------------------
def _standards(rows):
    """The standards the rows hold verdicts of, in their order; every one when none does."""
    sids = []
    for row in rows:
        sids += [s for s in row["verdicts"] if s not in sids]
    return sids or list(STANDARDS)


def csv_columns(rows, leading, trailing=(), verdict_prefix=""):
    """The CSV header: ``leading``, CALL_COLUMNS, METRIC_COLUMNS, "<verdict_prefix><standard>"
    and "<verdict_prefix><standard> detail" for each standard, ``trailing``."""
    verdicts = [
        c for s in _standards(rows) for c in (f"{verdict_prefix}{s}", f"{verdict_prefix}{s} detail")
    ]
    return [*leading, *CALL_COLUMNS, *METRIC_COLUMNS, *verdicts, *trailing]


def write_csv(path, rows, leading, trailing=(), verdict_prefix="", int_list=bracketed):
    """One line per row, under :func:`csv_columns`: None as empty, booleans as "true" /
    "false", shapes as "2x16x8x8", strides, paddings and dilations by ``int_list``
    (:func:`bracketed` or :func:`spaced`), the failing tasks in words, each standard's verdict
    and its numbers in words (with the warning, if any). A PyptoError when it cannot be
    written."""
    lines = csv_lines(rows, leading, trailing, verdict_prefix, int_list)
    _write(path, "CSV", lambda f: csv.writer(f).writerows(lines), newline="")


def csv_lines(rows, leading, trailing=(), verdict_prefix="", int_list=bracketed):
    """:func:`write_csv`'s header and lines, as lists of cells (for other table formats)."""
    sids = _standards(rows)
    lines = [csv_columns(rows, leading, trailing, verdict_prefix)]
    for row in rows:
        cells = [_cell(row, c, int_list) for c in (*leading, *CALL_COLUMNS, *METRIC_COLUMNS)]
        for sid in sids:
            cells += _verdict_cells(row["verdicts"].get(sid))
        lines.append(cells + [_cell(row, c, int_list) for c in trailing])
    return lines


def check_report_path(path, what):
    """A PyptoError unless ``path`` can take the ``what`` report (before any work): a file
    name, not a folder, in a writable folder."""
    if not isinstance(path, str) or not path.strip():
        raise FeError(ValueError(f"the {what} report path is {path!r}: give a file name"))
    if os.path.isdir(path):
        raise FeError(OSError(f"cannot write the {what} report {path}: it is a folder"))
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise FeError(
            OSError(f"cannot write the {what} report {path}: {folder} is not a writable folder")
        )


def check_table_path(path, what):
    """:func:`check_report_path`, and for a name ending in .xlsx, openpyxl installed."""
    check_report_path(path, what)
    if _is_xlsx(path):
        _openpyxl(path, what)


def _openpyxl(path, what):
    try:
        import openpyxl
    except ImportError:
        raise FeError(
            ImportError(
                f"cannot write the {what} report {path}: .xlsx needs openpyxl (pip install "
                f"openpyxl); or write a .csv"
            )
        ) from None
    return openpyxl


def _is_xlsx(path):
    return os.path.splitext(os.fspath(path))[1].lower() == ".xlsx"


def write_table(
    path, rows, leading, trailing=(), verdict_prefix="", int_list=bracketed, sheet="calls"
):
    """The rows as :func:`write_csv` writes them, or, for a name ending in .xlsx, the same
    cells in the sheet ``sheet`` of an Excel workbook (numbers as numbers; needs openpyxl)."""
    if not _is_xlsx(path):
        write_csv(path, rows, leading, trailing, verdict_prefix, int_list)
        return
    book = _openpyxl(path, "xlsx").Workbook()
    book.active.title = sheet
    for line in csv_lines(rows, leading, trailing, verdict_prefix, int_list):
        book.active.append([_xlsx_cell(cell) for cell in line])
    _write(path, "xlsx", book.save, mode="wb")


def _xlsx_cell(cell):
    """A finite number as itself; anything else (inf, nan, text, lists) as text."""
    if isinstance(cell, (int, float)) and not isinstance(cell, bool) and math.isfinite(cell):
        return cell
    return "" if cell is None else str(cell)


def write_json(path, table):
    """``table`` (JSON-ready) as indented JSON and a newline; a PyptoError when it cannot be
    written."""
    _write(path, "JSON", lambda f: (json.dump(table, f, indent=1), f.write("\n")))


def _write(path, what, body, newline=None, mode="w"):
    """``body(f)`` into ``path`` (UTF-8 text, or bytes with mode "wb"; replaced whole:
    ``fileio.atomic_writer``); an OSError as a PyptoError that names the ``what`` report."""
    try:
        with atomic_writer(path, mode, newline=newline) as f:
            body(f)
    except OSError as exc:
        raise FeError(OSError(f"cannot write the {what} report {path}: {exc}")) from None
