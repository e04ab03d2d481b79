"""The one unit of work of a sweep: one case in, one golden case folder and one row out.

``run_case(case, out_dir)`` is pure and deterministic: the folder ``out_dir/cases/<id>/`` is
what ``pypto golden`` writes (``_golden/files.write_case``), from inputs drawn with the case's
seed (its own, or one derived from its id), and the row depends on nothing but the case and
pypto's version, apart from the fields in :data:`VOLATILE` (time, host, process). When the
folder already holds the case and a kernel's output (``output/output.bin`` or ``.npy``), that
output is judged instead, as ``pypto compare`` judges it (:func:`judge_folder`).

A case the op refuses is a row with the rule (status "refused"), and so is a case the case file
did not let pypto read (rule "unreadable"); any other fault is a row with the error (status
"error"); nothing is raised. ``keep`` decides which golden folders are written: "all", only
those of the cases whose row is not a pass ("failed"), or none ("rows"). A row is a
judged-call row of ``_golden/calls.py`` (the keys ``pypto compare --msprobe`` and
``crosscheck`` write) with the sweep's own leading keys (case_id, name, source, status, rule,
format) and trailing ones.
"""

import json
import math
import os
import socket
import time

from .._core.fileio import read_json
from ..error import ConvBpInputError, PyptoError, PyptoMemoryError
from .schema import UNREADABLE, case_seed, format_text

__all__ = [
    "run_case",
    "judge_folder",
    "case_folder",
    "VOLATILE",
    "LEADING",
    "TRAILING",
    "KEEP",
    "ADDED",
]

LEADING = ("case_id", "name", "source", "status", "rule", "format")
TRAILING = (
    "judged",
    "pypto_max_ulp",
    "pypto_outside_bound",
    "input_size",
    "seed",
    "dist",
    "memory_bytes",
    "pypto_version",
    "seconds",
    "host",
    "pid",
    "started",
    "elapsed",
)
# what may differ between two runs of the same case (time and place; the sweep's run: when it
# started, how long it had run when the row was written)
VOLATILE = ("seconds", "host", "pid", "started", "elapsed")
# keys rows written before them lack, and the value such a row means
ADDED = {"format": "NCHW", "started": None, "elapsed": None}
# which golden case folders a sweep writes: every one, those of rows that are not a pass, none
KEEP = ("all", "failed", "rows")
FAULT_ENV = "PYPTO_SWEEP_TEST_FAULT"  # tests only: docs/sweep.md and CONTRIBUTING.md


def case_folder(out_dir, case):
    return os.path.join(out_dir, "cases", case["id"])


def _dist_text(case):
    """The inputs' distributions as the manifest's "dist" (a string); None when unread."""
    if case["inputs"] is None:
        return None
    parts = []
    for role in ("grad_output", "weight"):
        spec = case["inputs"][role]
        text = spec["dist"] + ("" if spec["range"] is None else f" {spec['range']}")
        parts.append(text)
    return parts[0] if parts[0] == parts[1] else f"grad_output {parts[0]}, weight {parts[1]}"


def _empty_row(case):
    from .._golden.calls import new_row

    return new_row(
        {
            "case_id": case["id"],
            "name": case.get("name"),
            "source": case.get("source"),
            "status": "error",
            "rule": None,
            "format": format_text(case),
        },
        {
            "judged": None,
            "pypto_max_ulp": None,
            "pypto_outside_bound": None,
            "input_size": case["input_size"],
            "seed": case_seed(case),
            "dist": _dist_text(case),
            "memory_bytes": None,
            "pypto_version": _version(),
            "seconds": None,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": None,
            "elapsed": None,
        },
        dtype=case["dtype"],
        grad_output=case["grad_output"],
        weight=case["weight"],
        strides=case["strides"],
        paddings=case["paddings"],
        dilations=case["dilations"],
        groups=case["groups"],
        tiles=case["tiles"] if isinstance(case["tiles"], dict) else None,
    )


def _version():
    from .._version import __version__

    return __version__


def _fault(case):
    """Tests only: ``PYPTO_SWEEP_TEST_FAULT`` = JSON {"case": id or name, "action": "sleep" |
    "exit", "seconds", "marker"}: the case sleeps, or its process exits at once (a killed
    worker); with "marker", only the first time (the marker file is created then)."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    fault = json.loads(spec)
    if fault.get("case") not in (case["id"], case.get("name")):
        return
    marker = fault.get("marker")
    if marker is not None:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    if fault.get("action") == "exit":
        os._exit(70)
    time.sleep(float(fault.get("seconds", 3600)))


def _refuse_what_make_case_cannot_see(case, dtype_name, input_size):
    """groups != 1 and fp32 are refused by the op's rules (G1, D1...): run the op's checks on
    shape-only tensors, in the op's order, so the row names the rule the op would raise."""
    from .._core.rules import validate_conv_backward_input
    from .._dtypes import DataType
    from ..tensor import Tensor

    dtype = {"fp16": DataType.DT_FP16, "bf16": DataType.DT_BF16, "fp32": DataType.DT_FP32}[
        dtype_name
    ]
    validate_conv_backward_input(
        Tensor(case["grad_output"], dtype),
        input_size if input_size is not None else [1, 1, 1, 1],
        Tensor(case["weight"], dtype),
        dtype,
        case["strides"],
        case["paddings"],
        case["dilations"],
        case["groups"],
    )
    raise PyptoError("F00000", "the op accepted a case pypto's golden cannot make")


def _make(case):
    """The case as a _golden Case (the op's rules and the tiles checked)."""
    from .._golden.case import make_case

    if case["groups"] != 1 or case["dtype"] == "fp32":
        _refuse_what_make_case_cannot_see(case, case["dtype"], case["input_size"])
    tiles = case["tiles"]
    return make_case(
        case["grad_output"],
        case["weight"],
        case["input_size"],
        case["dtype"],
        case["strides"],
        case["paddings"],
        case["dilations"],
        None if tiles == "suggested" else (tiles["l1"], tiles["l0"]),
        None if tiles == "suggested" else tiles["vec"],
    )


def _memory_bytes(made):
    """What the case allocates at most, by the estimates ``pypto golden`` checks."""
    from .._golden.case import comparison_bytes, golden_bytes, inputs_bytes

    return (
        inputs_bytes(made)
        + 2 * golden_bytes(made)
        + comparison_bytes(made)
        + 4 * math.prod(made.input_size)
    )


def _fill_case(row, made):
    row.update(
        grad_input=list(made.input_size),
        input_size=list(made.input_size),
        tiles={"l1": list(made.l1), "l0": list(made.l0), "vec": list(made.vec)},
        memory_bytes=_memory_bytes(made),
    )


def _output_path(folder):
    for name in ("output.bin", "output.npy"):
        path = os.path.join(folder, "output", name)
        if os.path.exists(path):
            return path
    return None


def judge_folder(folder, standard=None, row=None):
    """Judge the kernel output in a case folder as ``pypto compare`` does (its files checked:
    manifest, sha256 digests, the golden against the inputs): the row's judged fields."""
    from .._golden.accuracy import DEFAULT_STANDARD
    from .._golden.calls import judged
    from .._golden.files import read_case, read_inputs, read_result

    made, manifest = read_case(folder)
    actual = read_result(folder, made, _output_path(folder), manifest)
    dy, w, golden, reference = read_inputs(folder, made, manifest)
    result = _judge(made, dy, w, actual, golden, reference, standard or DEFAULT_STANDARD)
    own = _judge(made, dy, w, reference, golden, reference)
    fields = judged(result)
    fields.update(
        standard=standard or DEFAULT_STANDARD,
        judged="output",
        pypto_max_ulp=float(own.metrics.max_ulp),
        pypto_outside_bound=int(own.localisation.outside_count),
    )
    if row is not None:
        _fill_case(row, made)
        row.update(fields)
    return made, fields


def _judge(made, dy, w, actual, golden, reference, standard=None):
    """``pypto.testing.compare``'s judgement of ``actual`` against the golden, on the Case the
    folder or the case file made (its tiles: the localisation's task grid)."""
    from .._golden.accuracy import DEFAULT_STANDARD
    from .._golden.judge import judge_case

    return judge_case(made, dy, w, actual, standard or DEFAULT_STANDARD, golden, reference)


def _golden(case, folder, row, keep):
    """Check pypto's own result against the proven bound; write the golden case as ``keep``
    says (in the case's layouts)."""
    from .._core.memory import check_host_memory
    from .._golden.case import draw_inputs, golden_dgrad, pypto_dgrad
    from .._golden.files import write_case

    made = _make(case)
    _fill_case(row, made)
    check_host_memory(
        row["memory_bytes"],
        made.problem,
        "random inputs, the float64 golden, its error bound and the check of pypto's result",
    )
    seed = case_seed(case)
    dy, w = draw_inputs(
        made,
        (case["inputs"]["grad_output"]["dist"], case["inputs"]["weight"]["dist"]),
        seed,
        (case["inputs"]["grad_output"]["range"], case["inputs"]["weight"]["range"]),
    )
    golden = golden_dgrad(made, dy, w)
    reference = pypto_dgrad(made, dy, w)
    own = _judge(made, dy, w, reference, golden, reference)
    outside = int(own.localisation.outside_count)
    if keep == "all" or (keep == "failed" and outside != 0):
        write_case(
            folder,
            made,
            dy,
            w,
            golden,
            reference,
            seed,
            _dist_text(case),
            replace=True,
            layouts=case.get("layouts"),
        )
    # no kernel output yet: the row judges pypto's own result, by the proven bound (exact)
    row.update(
        status="pass" if outside == 0 else "fail",
        passed=outside == 0,
        judged="pypto",
        max_ulp=float(own.metrics.max_ulp),
        outside_bound=outside,
        elements=int(golden.size),
        pypto_max_ulp=float(own.metrics.max_ulp),
        pypto_outside_bound=outside,
    )


def _holds_this_case(folder, case):
    """Whether ``folder`` holds this case (its manifest's seed) and a kernel output."""
    try:
        manifest = read_json(os.path.join(folder, "manifest.json"), "the manifest")
    except PyptoError:
        return False
    return (
        isinstance(manifest, dict)
        and manifest.get("seed") == case_seed(case)
        and _output_path(folder) is not None
    )


def run_case(case, out_dir, *, threads=None, standard=None, keep="all"):
    """Run one case (a canonical dict from a case file, see ``pypto.sweep.read_cases``):
    write its golden folder under ``out_dir/cases/<id>`` (or judge the kernel output already
    there) and return its row. Never raises for a fault of the case: a refused case is a row
    with the rule, another fault a row with the error. ``threads``: pypto's CPU threads for
    this call (default: pypto's setting). ``keep``: which folders are written (:data:`KEEP`:
    "all"; "failed", only a case whose row is not a pass; "rows", none)."""
    from .._core.options import options
    from .._golden.calls import json_row

    if keep not in KEEP:
        raise ValueError(f"keep must be one of {', '.join(KEEP)}, not {keep!r}")
    start = time.perf_counter()
    row = _empty_row(case)
    if case.get("unreadable") is not None:  # nothing to run: the case file said why
        row.update(status="refused", rule=UNREADABLE, reason=case["unreadable"], seconds=0.0)
        return json_row(row)
    try:
        _fault(case)
        folder = case_folder(out_dir, case)
        with options(**({} if threads is None else {"num_threads": threads})):
            if _holds_this_case(folder, case):
                judge_folder(folder, standard, row)
            else:
                _golden(case, folder, row, keep)
    except ConvBpInputError as exc:
        row.update(status="refused", rule=exc.rule, reason=str(exc))
    except PyptoMemoryError as exc:
        row.update(status="refused", rule="memory", reason=str(exc))
    except PyptoError as exc:
        row.update(status="error", reason=str(exc))
    except Exception as exc:  # noqa: BLE001 - a sweep records every fault of a case as its row
        row.update(status="error", reason=f"{type(exc).__name__}: {exc}")
    row["seconds"] = round(time.perf_counter() - start, 6)
    return json_row(row)
