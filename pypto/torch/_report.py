"""The cross-check's table made readable: a failing call's message, the table as text, and
the report file (JSON, or CSV / xlsx by the file's name). Functions of the rows alone, which
``crosscheck`` keeps."""

import os

import torch

from .._golden import calls as _calls
from .._golden.accuracy import json_ready
from .._version import __version__


def failure_text(row, standard):
    """The one-line message of a call that failed ``standard``: its problem, its worst error,
    the failing standards and up to five failing regions (16-channel blocks by row bands
    inside the failing tasks)."""
    failed = _calls.failing_standards(row)
    return (
        f"pypto crosscheck: convolution_backward call {row['call']}"
        + (f" of {row['module']}" if row.get("module") else "")
        + " (grad_output "
        f"{_calls.shape_text(row['grad_output'])}, weight {_calls.shape_text(row['weight'])}, "
        f"strides {row['strides']}, paddings {row['paddings']}, dilations "
        f"{row['dilations']}, {row['dtype']}{_images_text(row)}): torch's grad_input fails "
        f"{standard}; max {row['max_ulp']:.3g} ulp, {row['outside_bound']} of "
        f"{row['elements']} elements outside the fp32-accumulation bound; failing "
        f"standards: {', '.join(failed)}; regions: {_calls.regions_text(row, 5) or 'none'}"
    )


def _images_text(row):
    """ ", images 2, 3" when the row judged a sample of its batch, else ""."""
    images = row.get("images")
    return "" if images in (None, "all") else ", images " + ", ".join(map(str, images))


def report_dict(rows, standard, on_fail):
    """The report: versions, the settings, the summary counts and every row, JSON-ready."""
    return json_ready(
        {
            "pypto_version": __version__,
            "torch_version": torch.__version__,
            "standard": standard,
            "on_fail": on_fail,
            "summary": _calls.counts(rows),
            "rows": [_calls.json_row(r) for r in rows],
        }
    )


def write_report(path, rows, standard, on_fail):
    """Write the report to ``path``: CSV when it ends with .csv, an Excel sheet when it ends
    with .xlsx (needs openpyxl), else JSON; return the path."""
    path = os.fspath(path)
    if path.lower().endswith((".csv", ".xlsx")):
        _calls.write_table(
            path,
            rows,
            ("call", "module", "status", "rule"),
            trailing=("images", "seconds"),
            verdict_prefix="verdict_",
            int_list=_calls.spaced,
            sheet="crosscheck",
        )
    else:
        _calls.write_json(path, report_dict(rows, standard, on_fail))
    return path


def table_text(rows):
    """The rows as text, one line per call, and a line of counts."""
    named = any(r.get("module") for r in rows)  # a module column when the rows name them
    width = max([len("module")] + [len(r.get("module") or "") for r in rows]) if named else 0
    lines = [
        f"{'call':>4}  "
        + (f"{'module':<{width}} " if named else "")
        + f"{'status':<7} {'grad_output':<14} {'weight':<14} "
        f"{'s':<5} {'p':<5} {'d':<5} {'dtype':<5} {'max ulp':>8} {'outside':>8}  note"
    ]
    for r in rows:
        ulp = "" if r["max_ulp"] is None else f"{r['max_ulp']:.3g}"
        outside = "" if r["outside_bound"] is None else str(r["outside_bound"])
        note = r["reason"] or ""
        if r["rule"]:
            note = f"rule {r['rule']}"
        if r["status"] == "fail":
            note = f"{len(r['failing_tasks'])} failing task(s)"
        if r["status"] in ("pass", "fail") and _images_text(r):
            note = (note + "; " if note else "") + _images_text(r)[2:]
        lines.append(
            f"{r['call']:>4}  "
            + (f"{r.get('module') or '':<{width}} " if named else "")
            + f"{r['status']:<7} {_calls.shape_text(r['grad_output']):<14} "
            f"{_calls.shape_text(r['weight']):<14} "
            f"{','.join(map(str, r['strides'])):<5} "
            f"{','.join(map(str, r['paddings'][::2])):<5} "
            f"{','.join(map(str, r['dilations'])):<5} {r['dtype']:<5} "
            f"{ulp:>8} {outside:>8}  {note[:60]}"
        )
    s = _calls.counts(rows)
    lines.append(
        f"{s['calls']} call(s): {s['judged']} judged ({s['passed']} pass, "
        f"{s['failed']} fail), {s['skipped']} skipped"
    )
    return "\n".join(lines)
