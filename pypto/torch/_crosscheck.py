"""``crosscheck``: a TorchDispatchMode that judges torch's own grad_input of every
``aten.convolution_backward`` call against pypto's float64 golden by CANN's accuracy
standards, and keeps one row per call (``_report`` makes them readable)."""

import contextlib
import os
import sys
import time
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import testing as _testing
from .._core.options import get_convbp_input_tile_shapes, get_vec_tile_shapes, options
from .._golden import calls as _calls
from .._golden.judge import check_count, check_standard, check_top
from ..error import FeError, PyptoError
from ._convert import _dtype_name, _host, _without_data
from ._plan import _run_plan, _scope_of
from ._report import failure_text, report_dict, table_text, write_report


class CrosscheckError(AssertionError):
    """A grad_input that failed the standard under ``crosscheck(on_fail="raise")``; ``row`` is
    its table row and ``result`` the ``pypto.testing.CompareResult``."""

    def __init__(self, message, row, result):
        super().__init__(message)
        self.row, self.result = row, result


class CrosscheckWarning(UserWarning):
    """A grad_input that failed the standard under ``crosscheck(on_fail="warn")``."""


_ON_FAIL = ("warn", "raise", "ignore")


_CONV_BACKWARD = torch.ops.aten.convolution_backward.default
_ARG_NAMES = [a.name for a in _CONV_BACKWARD._schema.arguments]


_BLAS = []  # threadpoolctl's controller of NumPy's BLAS, made on first use (or False)


@contextlib.contextmanager
def _judging_threads(threads):
    """pypto's threads and, with threadpoolctl, the BLAS threads at ``threads`` (None: as set)."""
    if threads is None:
        yield
        return
    if not _BLAS:
        try:
            from threadpoolctl import ThreadpoolController

            _BLAS.append(ThreadpoolController().select(user_api="blas"))
        except Exception:  # not installed, or a library it cannot read: pypto's threads only
            _BLAS.append(False)
    blas = _BLAS[0].limit(limits=threads) if _BLAS[0] else contextlib.nullcontext()
    with options(num_threads=threads), blas:
        yield


class crosscheck(TorchDispatchMode):
    """Judge torch's own grad_input of every ``aten.convolution_backward`` call by CANN's
    accuracy standards, against pypto's float64 golden (``pypto.testing.compare``).

    >>> with pypto.torch.crosscheck(standard="dual-L0", report="xcheck.json") as xc:
    ...     loss = model(x).float().sum(); loss.backward()
    >>> xc.rows      # one dict per call: verdicts, max ulp, elements outside the bound, ...

    torch computes every call unchanged; the mode only reads the results. A call inside pypto's
    domain (grad_input asked for, fp16 / bf16, 2-D, groups 1, symmetric padding, ...) is judged
    by ``standard`` (one of ``pypto.testing.STANDARDS`` or "all"); every standard's verdict is
    kept. Others are listed as skipped, with the op's rule and message (or why else).

    threads: the threads that judge (pypto's own result, NumPy's BLAS for the float64 golden
    when threadpoolctl is installed); None leaves both as set. 1 by default: the judging runs
    between torch's operators, whose OpenMP threads are still spinning, and more threads than
    cores slow both (on 2 cores a ResNet-18-like bf16 step under crosscheck took 0.26 s with 1,
    0.56 to 2.1 s with the defaults).

    on_fail: "warn" (a CrosscheckWarning per failing call), "raise" (CrosscheckError at the first
    failing call, after recording it) or "ignore". report: a path written at exit (also on an
    exception), CSV when it ends with .csv, else JSON; None: no file.

    failures maps each failing call's index to its CompareResult (``print(xc.failures[i])``
    for the whole report), for the first ``keep_failures`` failing calls, and to None for later
    ones: a result holds about 80 bytes per grad_input element (the float64 golden, the
    localisation's error arrays, copies of both results), so a training loop under the mode
    keeps at most that many. Every call, failing or not, keeps its row in ``rows`` (verdicts,
    max ulp, failing tasks). 0 keeps no result.

    Calls whose tensors hold no data (the meta device, fake tensors) are listed as skipped.
    """

    def __init__(
        self,
        standard=_testing.DEFAULT_STANDARD,
        report=None,
        on_fail="warn",
        top=5,
        threads=1,
        keep_failures=4,
    ):
        super().__init__()
        if threads is not None:
            options(num_threads=threads)  # checks it, as the op's option: int in [1, 1024]
        check_standard(standard)
        if not (isinstance(on_fail, str) and on_fail in _ON_FAIL):
            raise FeError(
                ValueError(f"on_fail must be one of {', '.join(_ON_FAIL)}, but got {on_fail!r}")
            )
        if report is not None:
            if not isinstance(report, (str, os.PathLike)):
                raise FeError(
                    TypeError(
                        f"report must be a path (str or os.PathLike) or None, "
                        f"but got {type(report).__name__}"
                    )
                )
            report = os.fspath(report)
            folder = os.path.dirname(os.path.abspath(report))
            if not os.path.isdir(folder):
                raise FeError(ValueError(f"report: the folder {folder} does not exist"))
        self.standard, self.report, self.on_fail = standard, report, on_fail
        self.top = check_top(top)
        self.threads = threads
        self.keep_failures = check_count(keep_failures, "keep_failures")
        self.rows = []
        self.failures = {}
        self._kept_failures = 0
        self._calls = 0

    # --- the mode ---------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is _CONV_BACKWARD:
            self._judge(args, kwargs, out)
        return out

    def __exit__(self, exc_type, exc_value, traceback):
        try:
            return super().__exit__(exc_type, exc_value, traceback)
        finally:
            if self.report is not None:
                self.write(self.report)

    # --- one call ---------------------------------------------------------------------------
    def _judge(self, args, kwargs, out):
        a = dict(zip(_ARG_NAMES, args))
        a.update(kwargs)
        index = self._calls
        self._calls += 1
        dy, x, w = a["grad_output"], a["input"], a["weight"]
        stride, padding, dilation = list(a["stride"]), list(a["padding"]), list(a["dilation"])
        groups, mask = a["groups"], list(a["output_mask"])
        paddings = (
            [padding[0], padding[0], padding[1], padding[1]] if len(padding) == 2 else padding
        )
        row = _calls.new_row(
            {"call": index, "status": "skipped", "rule": None},
            {"seconds": None},
            dtype=_dtype_name(dy.dtype),
            grad_output=list(dy.shape),
            weight=list(w.shape),
            grad_input=list(x.shape),
            strides=stride,
            paddings=paddings,
            dilations=dilation,
            groups=groups,
            standard=self.standard,
            elements=x.numel(),
        )
        self.rows.append(row)
        if not mask[0]:
            row["reason"] = "grad_input not asked for (output_mask[0] is False)"
            return
        if a["transposed"]:
            row["reason"] = (
                "transposed convolution: its grad_input is a forward convolution, not a dgrad"
            )
            return
        if any(a["output_padding"]):
            row["reason"] = f"output_padding {list(a['output_padding'])} (transposed only)"
            return
        empty = _without_data(out[0], dy, w)
        if empty is not None:
            row["reason"] = f"{empty}: no data to judge"
            return
        start = time.perf_counter()
        try:
            plan = _run_plan(
                list(dy.shape),
                list(w.shape),
                list(x.shape),
                dy.dtype,
                stride,
                paddings,
                dilation,
                groups,
                w.dtype,
            )
            with _scope_of(*plan):
                l1, l0 = get_convbp_input_tile_shapes()
                tiles = (l1, l0, get_vec_tile_shapes())
            with _judging_threads(self.threads):
                result = _testing.compare(
                    _host(out[0]),
                    _host(dy),
                    _host(w),
                    list(x.shape),
                    stride,
                    paddings,
                    dilation,
                    tiles=tiles,
                    standard=self.standard,
                )
        except PyptoError as exc:
            row["rule"] = getattr(exc, "rule", None)
            row["reason"] = str(exc)
            return
        row["seconds"] = round(time.perf_counter() - start, 6)
        row.update(_calls.judged(result))
        if result.passed:
            return
        # every failing call is listed; only the first keep_failures keep their whole result
        kept = self._kept_failures < self.keep_failures
        self.failures[index] = result if kept else None
        self._kept_failures += kept
        text = failure_text(row, self.standard)
        if self.on_fail == "raise":
            raise CrosscheckError(text + "\n" + result.report(self.top), row, result)
        if self.on_fail == "warn":
            # a registry of its own: Python's default filter shows a warning once per text and
            # place, and the same call of a later step or crosscheck fails with the same text
            line = sys._getframe().f_lineno + 1
            warnings.warn_explicit(text, CrosscheckWarning, __file__, line, __name__, {})

    # --- the table --------------------------------------------------------------------------
    def summary(self):
        """{"calls", "judged", "passed", "failed", "skipped"} counts."""
        return _calls.counts(self.rows)

    def as_dict(self):
        return report_dict(self.rows, self.standard, self.on_fail)

    def write(self, path):
        """Write the table to ``path``: CSV when it ends with .csv, else JSON."""
        return write_report(path, self.rows, self.standard, self.on_fail)

    def table(self):
        """The rows as text, one line per call."""
        return table_text(self.rows)

    def __str__(self):
        return self.table()
