"""The table of an msprobe dump's conv2d backward calls: one row per call
(:mod:`pypto._golden.calls`), the report with its text, JSON and CSV (or xlsx)."""

from ..._version import __version__
from ...error import FeError
from .. import calls as _calls
from ..calls import check_report_path
from .records import CALL_TENSORS, DUMP_JSON, dtype_name

__all__ = ["CSV_COLUMNS", "call_row", "MsprobeReport", "check_report_path"]

# the CSV's columns before _calls.CALL_COLUMNS; "NPU Name" is msprobe's compare CSV's key
_LEADING = ("dump", "api", "NPU Name", "module", "status")
CSV_COLUMNS = _LEADING + _calls.CALL_COLUMNS + _calls.METRIC_COLUMNS


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
        "NPU Name": call.npu_name,
        "module": call.module,
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
        dump.json, relative to ``path``), ``api``, ``NPU Name`` (msprobe's name of the dumped
        grad_input, the key of its compare CSV), ``module`` (the nn.Module's name, for a Module
        entry or an API call that one recorded too), ``forward``, ``parameters_from`` (Module
        calls), ``status`` ("pass", "fail" or "skipped"), ``reason`` (why skipped), ``dtype``,
        the shapes ``grad_output``, ``weight``, ``grad_input``, ``strides``, ``paddings``,
        ``dilations``, ``groups``, ``standard``, ``passed`` (None when skipped), ``verdicts``
        ({standard: verdict with numbers, thresholds, detail, source}), ``max_ulp``,
        ``outside_bound`` (elements outside the fp32-accumulation bound), ``elements``,
        ``failing_tasks`` ([{image, channel_block, channels, m_tile, rows, outside, elements,
        max_ulp, where, regions}], each region {image, channels, rows, outside, elements,
        max_ulp, where}), msprobe's columns against the float64 golden (``Cosine``,
        ``EucDist``, ``MaxAbsErr``, ``MaxRelativeErr``, ``One Thousandth Err Ratio``,
        ``Five Thousandths Err Ratio``) and ``tiles`` (the suggested tiles the localisation
        uses: ``l1``, ``l0``, ``vec`` and ``grid`` with ``rows_per_m_tile``, ``m_tiles``,
        ``channels_per_block``, ``channel_blocks``, ``text``).
    same : the Module entries left out as the same call as an API entry (level mix):
        [{dump, api, same_as}]; the API entry's row names the module.
    result : the CompareResult of the call when exactly one was chosen and judged, else None
        (its localisation, worst elements and heatmap: :meth:`chosen_text`, ``result.plot``).
    passed : no judged call fails (True also when none was judged: see ``judged``)
    """

    def __init__(self, path, dumps, standard, rows, same=(), result=None):
        self.path, self.dumps, self.standard, self.rows = path, dumps, standard, rows
        self.same, self.result = list(same), result

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
        same = ""
        if self.same:
            same = (
                f" (and {len(self.same)} Module entr{'y' if len(self.same) == 1 else 'ies'} "
                f"of the same call(s), judged once as their Functional one)"
            )
        return (
            f"summary: {len(self.rows)} conv2d backward call(s) in {len(self.dumps)} "
            f"{DUMP_JSON}{same}: {self.judged - self.failed} passed, {self.failed} failed, "
            f"{self.skipped} skipped ({chosen}); verdict {word}"
        )

    def line(self, row):
        where = f"{row['dump']}: " if len(self.dumps) > 1 else ""
        head = {"pass": "PASS", "fail": "FAIL", "skipped": "SKIP"}[row["status"]]
        module = f" (module {row['module']})" if row["module"] is not None else ""
        text = f"{head:<5} {where}{row['api']}{module}"
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
        if row["failing_tasks"]:
            text += f"; failing region(s): {_calls.regions_text(row)}"
        return text

    def text(self):
        """One line per call, then the summary."""
        return "\n".join([self.line(r) for r in self.rows] + [self.summary()])

    def __str__(self):
        return self.text()

    def chosen_text(self, top=10):
        """The chosen call's whole report (``CompareResult.report``: metrics, verdicts,
        localisation, ``top`` worst elements); None when no one call was chosen and judged."""
        if self.result is None:
            return None
        (row,) = self.rows
        return f"{row['api']}, judged as a golden case:\n{self.result.report(top)}"

    def as_dict(self, top=10):
        """The whole table as plain data (``pypto compare --msprobe ... --json``); with one
        call chosen and judged, also its localisation and ``top`` worst elements."""
        table = {
            "pypto_version": __version__,
            "msprobe_dump": str(self.path),
            "dump_files": [str(p) for p in self.dumps],
            "standard": self.standard,
            "passed": self.passed,
            "summary": _calls.counts(self.rows),
            "same_calls": self.same,
            "calls": self.rows,
        }
        if self.result is not None:
            (row,) = self.rows
            table["chosen_call"] = {
                "dump": row["dump"],
                "api": row["api"],
                "localisation": self.result.localisation.as_dict(top),
            }
        return table

    def write_json(self, path, top=10):
        _calls.write_json(path, self.as_dict(top))

    def csv_columns(self):
        return _calls.csv_columns(self.rows, _LEADING)

    def write_csv(self, path):
        """One row per call: the columns of CSV_COLUMNS, then each standard's verdict and its
        numbers in words; a name ending in .xlsx is written as an Excel sheet."""
        _calls.write_table(path, self.rows, _LEADING, int_list=_calls.bracketed, sheet="msprobe")
