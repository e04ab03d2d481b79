"""The table of an msprobe dump's conv2d backward calls: one row per call
(:mod:`pypto._golden.calls`), the report with its text, JSON and CSV, and the check that a
report path can be written."""

import os

from ..._version import __version__
from ...error import FeError
from .. import calls as _calls
from .records import CALL_TENSORS, DUMP_JSON, dtype_name

__all__ = ["CSV_COLUMNS", "call_row", "MsprobeReport", "check_report_path"]

_LEADING = ("dump", "api", "status")  # the CSV's columns before _calls.CALL_COLUMNS
CSV_COLUMNS = _LEADING + _calls.CALL_COLUMNS


def call_row(call, standard):
    """The row of a pairs.Call before it is judged (status "skipped", its reason if any);
    ``row.update(...)`` with what a judgement found fills in the rest."""
    names = ("strides", "paddings", "dilations", "groups")
    params = dict(zip(names, call.params)) if call.params else {}  # new_row: None
    shapes = {}
    for name in CALL_TENSORS:
        try:
            shapes[name] = call.shape(name)
        except FeError:
            shapes[name] = None
    dtype = call.dtype
    if dtype is None and call.tensors:  # skipped before the dtype check
        kinds = sorted({dtype_name(t) for t in call.tensors.values()})
        dtype = kinds[0] if len(kinds) == 1 else "mixed (" + ", ".join(kinds) + ")"
    leading = {
        "dump": call.label,
        "api": call.api,
        "forward": call.forward,
        "parameters_from": call.parameters_from,
        "status": "skipped",
    }
    return _calls.new_row(
        leading, reason=call.skip, dtype=dtype, **shapes, **params, standard=standard
    )


class MsprobeReport:
    """The table of an msprobe dump's conv2d backward calls (:func:`judge_dump`).

    Attributes
    ----------
    path : the dump folder given
    dumps : the dump.json files read
    standard : the standard that decides each call's verdict ("all": every one)
    rows : one dict per call (JSON-ready; ``pypto._golden.calls``): ``dump`` (the folder of its
        dump.json, relative to ``path``), ``api``, ``forward``, ``parameters_from`` (Module
        calls), ``status`` ("pass", "fail" or "skipped"), ``reason`` (why skipped), ``dtype``,
        the shapes ``grad_output``, ``weight``, ``grad_input``, ``strides``, ``paddings``,
        ``dilations``, ``groups``, ``standard``, ``passed`` (None when skipped), ``verdicts``
        ({standard: verdict with numbers, thresholds, detail, source}), ``max_ulp``,
        ``outside_bound`` (elements outside the fp32-accumulation bound), ``elements``,
        ``failing_tasks`` ([{image, channel_block, channels, m_tile, rows, outside, elements,
        max_ulp, where}]) and ``tiles`` (the suggested tiles the localisation uses: ``l1``,
        ``l0``, ``vec`` and ``grid`` with ``rows_per_m_tile``, ``m_tiles``,
        ``channels_per_block``, ``channel_blocks``, ``text``).
    passed : no judged call fails (True also when none was judged: see ``judged``)
    """

    def __init__(self, path, dumps, standard, rows):
        self.path, self.dumps, self.standard, self.rows = path, dumps, standard, rows

    @property
    def judged(self):
        return _calls.counts(self.rows)["judged"]

    @property
    def failed(self):
        return _calls.counts(self.rows)["failed"]

    @property
    def skipped(self):
        return _calls.counts(self.rows)["skipped"]

    @property
    def passed(self):
        return self.failed == 0

    def __bool__(self):
        return self.passed

    def summary(self):
        word = "PASS" if self.passed else "FAIL"
        if self.judged == 0:
            word = "nothing judged"
        chosen = "every standard" if self.standard == "all" else self.standard
        return (
            f"summary: {len(self.rows)} conv2d backward call(s) in {len(self.dumps)} "
            f"{DUMP_JSON}: {self.judged - self.failed} passed, {self.failed} failed, "
            f"{self.skipped} skipped ({chosen}); verdict {word}"
        )

    def line(self, row):
        where = f"{row['dump']}: " if len(self.dumps) > 1 else ""
        head = {"pass": "PASS", "fail": "FAIL", "skipped": "SKIP"}[row["status"]]
        text = f"{head:<5} {where}{row['api']}"
        if row["status"] == "skipped":
            shapes = ""
            if row["grad_output"] and row["weight"] and row["grad_input"]:
                shapes = (
                    f" {row['dtype']} dy {row['grad_output']} w {row['weight']} -> "
                    f"dx {row['grad_input']}"
                )
            return f"{text}{shapes}: {row['reason']}"
        text += (
            f" {row['dtype']} dy {row['grad_output']} w {row['weight']} -> dx "
            f"{row['grad_input']}, strides {row['strides']}, paddings {row['paddings']}, "
            f"dilations {row['dilations']}: max {_calls.number(row['max_ulp'])} ulp, "
            f"{row['outside_bound']} of {row['elements']} outside the bound; "
        )
        failing = _calls.failing_standards(row)
        text += ("fails " + ", ".join(failing)) if failing else "every standard passes"
        tasks = row["failing_tasks"]
        if tasks:
            shown = "; ".join(
                f"{t['where']} ({t['outside']} of {t['elements']})" for t in tasks[:3]
            )
            more = f"; and {len(tasks) - 3} more" if len(tasks) > 3 else ""
            text += f"; failing task(s): {shown}{more}"
        return text

    def text(self):
        """One line per call, then the summary."""
        return "\n".join([self.line(r) for r in self.rows] + [self.summary()])

    def __str__(self):
        return self.text()

    def as_dict(self):
        """The whole table as plain data (``pypto compare --msprobe ... --json``)."""
        return {
            "pypto_version": __version__,
            "msprobe_dump": str(self.path),
            "dump_files": [str(p) for p in self.dumps],
            "standard": self.standard,
            "passed": self.passed,
            "summary": _calls.counts(self.rows),
            "calls": self.rows,
        }

    def write_json(self, path):
        _calls.write_json(path, self.as_dict())

    def csv_columns(self):
        return _calls.csv_columns(self.rows, _LEADING)

    def write_csv(self, path):
        """One row per call: the columns of CSV_COLUMNS, then each standard's verdict and its
        numbers in words."""
        _calls.write_csv(path, self.rows, _LEADING, int_list=_calls.bracketed)


def check_report_path(path, what):
    """A PyptoError unless ``path`` can be written (before any work)."""
    if not isinstance(path, str) or not path.strip():
        raise FeError(ValueError(f"the {what} report path is {path!r}: give a file name"))
    if os.path.isdir(path):
        raise FeError(OSError(f"cannot write the {what} report {path}: it is a folder"))
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise FeError(
            OSError(f"cannot write the {what} report {path}: {folder} is not a writable folder")
        )
