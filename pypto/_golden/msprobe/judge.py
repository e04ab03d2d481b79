"""The whole dump judged: its dump.json files read and paired into conv2d backward calls,
every tensor file found, then each call's tensors read and judged as ``pypto.testing.compare``
judges a result (:func:`pypto._golden.judge.judge_case`), one table row per call."""

import os

from ...error import PyptoMemoryError
from .. import calls as _calls
from ..judge import judge_case
from .discover import find_dumps, load_dump
from .pairs import calls_of
from .records import DUMP_JSON, dump_error
from .table import MsprobeReport, call_row
from .tensors import locate_tensor_files, read_call_tensors

__all__ = ["read_calls", "judge_call", "judge_dump"]


def read_calls(path):
    """``(dumps, calls)``: the dump.json files at or below ``path`` and every conv2d backward
    call in them, the tensor files of those to judge located. Raises a PyptoError, before
    reading any tensor, for a dump without tensors, a missing tensor file or a dump without
    any conv2d backward call."""
    dumps = find_dumps(path)
    path = os.fspath(path)
    root = path if os.path.isdir(path) else os.path.dirname(path)
    calls, loaded = [], {}
    for dump_json in dumps:
        dump = load_dump(dump_json)
        loaded[dump_json] = dump
        label = os.path.relpath(os.path.dirname(dump_json), root).replace(os.sep, "/")
        calls += calls_of(dump_json, dump, label)
    if not calls:
        raise dump_error(
            f"no conv2d backward call in {path} ({len(dumps)} {DUMP_JSON} read): "
            f"msprobe records one as Functional.conv2d.<n>.backward (level L1 or mix) "
            f"or Module.<name>.Conv2d.backward.<n> (level L0 or mix); was a backward "
            f"pass dumped?"
        )
    locate_tensor_files(calls, loaded)  # every file the judged calls need, before any work
    return dumps, calls


def judge_call(call, standard):
    """The CompareResult of a call that is not skipped: its dumped grad_input against the
    float64 golden of its dumped grad_output and weight, the localisation over the task grid
    of the suggested tiles (the dumped result was not made with tiles: the grid only names
    where the errors are). Raises PyptoMemoryError when the host's memory is short."""
    arrays = read_call_tensors(call)
    return judge_case(
        call.case, arrays["grad_output"], arrays["weight"], arrays["grad_input"], standard
    )


def judge_dump(path, standard):
    """:class:`MsprobeReport` of every conv2d backward call in the dump.json files at or below
    ``path``. Raises a PyptoError, before judging anything, for a dump without tensors, a
    missing tensor file or a dump without any conv2d backward call."""
    dumps, calls = read_calls(path)
    rows = []
    for call in calls:
        row = call_row(call, standard)
        rows.append(row)
        if call.skip is not None:
            continue
        try:
            result = judge_call(call, standard)
        except PyptoMemoryError as exc:
            row["reason"] = f"too large for this host's memory: {exc}"
            continue
        row.update(_calls.json_row(_calls.judged(result)))
    return MsprobeReport(os.fspath(path), dumps, standard, rows)
