"""The whole dump judged: its dump.json files read and paired into conv2d backward calls, the
calls chosen by api name, every tensor file found, then each call's tensors read and judged as
``pypto.testing.compare`` judges a result (:func:`pypto._golden.judge.judge_case`), one table
row per call; a Module entry that is the same call as an API entry (level mix) is judged once.
"""

import fnmatch
import os

import numpy as np

from ...error import PyptoMemoryError
from .. import calls as _calls
from ..judge import judge_case
from .discover import find_dumps, load_dump
from .pairs import calls_of, same_calls
from .records import DUMP_JSON, dump_error
from .table import MsprobeReport, call_row
from .tensors import locate_tensor_files, read_call_tensors

__all__ = ["read_calls", "chosen_calls", "judge_call", "judge_calls", "judge_dump", "MAX_NAMES"]

MAX_NAMES = 12  # api names listed when none matches


def read_calls(path, api=None):
    """``(dumps, calls)``: the dump.json files at or below ``path`` and every conv2d backward
    call in them whose api name (or msprobe's name of its grad_input, "NPU Name") is ``api``
    or matches it as a shell glob (None: every call), the tensor files of those to judge
    located. Raises a PyptoError, before reading any tensor, for a dump without tensors, a
    missing tensor file, a dump without any conv2d backward call, or none that ``api``
    matches (naming those there are)."""
    if api is not None and (not isinstance(api, str) or not api.strip()):
        raise dump_error(f"api must be a call's name or a glob such as '*conv2d.1*', not {api!r}")
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
    if api is not None:
        calls = _matching(calls, api, path)
    locate_tensor_files(calls, loaded)  # every file the judged calls need, before any work
    return dumps, calls


def _matching(calls, api, path):
    """The calls ``api`` names (exactly or as a glob), or a PyptoError naming every call."""
    chosen = [
        c
        for c in calls
        if any(n == api or fnmatch.fnmatchcase(n, api) for n in (c.api, c.npu_name) if n)
    ]
    if not chosen:
        names = list(dict.fromkeys(c.api for c in calls))
        more = f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else ""
        raise dump_error(
            f"no conv2d backward call in {path} is named {api!r} (exactly or as a glob such "
            f"as '*conv2d.1*'); its calls: {', '.join(names[:MAX_NAMES])}{more}"
        )
    return chosen


def chosen_calls(calls):
    """``calls`` less the Module entries that are the same call as an API entry among them
    (``pairs.same_calls``): one per call judged, the rows a report will have."""
    module_entries = {id(module) for module, _ in same_calls(calls)}
    return [c for c in calls if id(c) not in module_entries]


def judge_call(call, standard):
    """The CompareResult of a call that is not skipped: its dumped grad_input against the
    float64 golden of its dumped grad_output and weight, the localisation over the task grid
    of the suggested tiles (the dumped result was not made with tiles: the grid only names
    where the errors are). Raises PyptoMemoryError when the host's memory is short."""
    return _judged(call, read_call_tensors(call), standard)


def _judged(call, arrays, standard):
    return judge_case(
        call.case, arrays["grad_output"], arrays["weight"], arrays["grad_input"], standard
    )


def _judge_row(call, standard):
    """(row, result, arrays) of one call; result and arrays None when it is not judged."""
    row = call_row(call, standard)
    if call.skip is not None:
        return row, None, None
    arrays = read_call_tensors(call)
    try:
        result = _judged(call, arrays, standard)
    except PyptoMemoryError as exc:
        row["reason"] = f"too large for this host's memory: {exc}"
        return row, None, None
    row.update(_calls.json_row(_calls.judged(result)))
    return row, result, arrays


def _same_bits(arrays, module):
    """Whether the Module entry's tensors hold the very bits of ``arrays`` (its API call's)."""
    theirs = read_call_tensors(module)
    return all(
        a.shape == theirs[k].shape and np.array_equal(a.view(np.uint16), theirs[k].view(np.uint16))
        for k, a in arrays.items()
    )


def judge_calls(path, dumps, calls, standard):
    """:class:`MsprobeReport` of ``calls`` (from :func:`read_calls`): one row per call, a Module
    entry whose API call is among them left out (named in the API call's row and in
    ``report.same``) when both are skipped or their dumped tensors are bitwise the same (else
    judged on its own); ``report.result`` the CompareResult of the only call, if one."""
    pairs = same_calls(calls)
    entry_of = {id(inner): module for module, inner in pairs}
    module_entries = {id(module) for module, _ in pairs}
    rows, same, first = [], [], None
    for call in calls:
        if id(call) in module_entries:
            continue
        row, result, arrays = _judge_row(call, standard)
        rows.append(row)
        first = result if len(rows) == 1 else None  # one result kept at most: they are large
        module = entry_of.get(id(call))
        if module is None:
            continue
        if arrays is None or _same_bits(arrays, module):
            row["module"] = module.module
            same.append({"dump": module.label, "api": module.api, "same_as": call.api})
        else:  # not what construct.json says: judged on its own
            rows.append(_judge_row(module, standard)[0])
            first = None
    return MsprobeReport(os.fspath(path), dumps, standard, rows, same, first)


def judge_dump(path, standard, api=None):
    """:class:`MsprobeReport` of every conv2d backward call in the dump.json files at or below
    ``path`` (those ``api`` names: see :func:`read_calls`). Raises a PyptoError, before
    judging anything, for a dump without tensors, a missing tensor file, a dump without any
    conv2d backward call, or none that ``api`` names."""
    dumps, calls = read_calls(path, api)
    return judge_calls(path, dumps, calls, standard)
