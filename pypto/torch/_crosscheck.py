"""``crosscheck``: a TorchFunctionMode that judges torch's own grad_input of every
convolution's backward (autograd's ConvolutionBackward0 node, ``aten.convolution_backward``)
against pypto's float64 golden by CANN's accuracy standards, and keeps one row per call
(``_report`` makes them readable).

How it sees the calls: at each backward (``Tensor.backward``, ``torch.autograd.backward`` or
``.grad``, which the mode intercepts) it walks the autograd graph from the roots and hooks every
ConvolutionBackward0 node it has not hooked yet; the node's hook receives the grad_input torch
computed, its saved input, weight and settings. A TorchDispatchMode would see the call directly,
but it routes every aten operator of the step through Python (a ResNet-18 bf16 step: 358
operators, +17 ms of 190); a function mode sees the ~550 Python-level calls of the forward and
the optimizer, at about a quarter of that."""

import contextlib
import math
import os
import sys
import time
import warnings

import torch
from torch.overrides import TorchFunctionMode

from .. import testing as _testing
from .._core.options import get_convbp_input_tile_shapes, get_vec_tile_shapes, options
from .._core.values import as_int
from .._golden import calls as _calls
from .._golden.judge import check_count, check_standard, check_top
from ..error import FeError, PyptoError
from ._convert import _dtype_name, _host, _without_data
from ._graph import (
    BACKWARDS,
    CONVOLUTIONS,
    MODES,
    MODULE_KEY,
    ModuleNames,
    call_of,
    convolution_nodes,
    graph_roots,
)
from ._plan import _run_plan, _scope_of
from ._report import failure_text, report_dict, table_text, write_report


def _images(t, chosen):
    """The images ``chosen`` (a sorted list; None: all) of the batch ``t``: a view when they
    are consecutive."""
    if chosen is None:
        return t
    if chosen[-1] - chosen[0] == len(chosen) - 1:
        return t.narrow(0, chosen[0], len(chosen))
    return t.index_select(0, torch.tensor(chosen))


class CrosscheckError(AssertionError):
    """A grad_input that failed the standard under ``crosscheck(on_fail="raise")``; ``row`` is
    its table row and ``result`` the ``pypto.testing.CompareResult``."""

    def __init__(self, message, row, result):
        super().__init__(message)
        self.row, self.result = row, result


class CrosscheckWarning(UserWarning):
    """A grad_input that failed the standard under ``crosscheck(on_fail="warn")``."""


_ON_FAIL = ("warn", "raise", "ignore")


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


def _positive_int(value, name):
    """``value`` as an int >= 1 (pypto's one rule of what counts as an int)."""
    number = as_int(value)
    if number is None or number < 1:
        kind = TypeError if number is None else ValueError
        raise FeError(kind(f"{name} must be an int >= 1, but got {value!r}"))
    return number


def _share(value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise FeError(ValueError(f"budget must be a number in (0, 1] or None, but got {value!r}"))
    return float(value)


class crosscheck(TorchFunctionMode):
    """Judge torch's own grad_input of every convolution's backward (``aten.convolution_backward``,
    autograd's ConvolutionBackward0) by CANN's accuracy standards, against pypto's float64
    golden (``pypto.testing.compare``).

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
    localisation's error arrays, copies of both results) and float32 copies of grad_output
    and weight (for its error bound, made whole only when asked for), so a training loop under
    the mode keeps at most that many. Every call, failing or not, keeps its row in ``rows``
    (verdicts, max ulp, failing tasks). 0 keeps no result.

    Calls whose tensors hold no data (the meta device, fake tensors) are listed as skipped.

    What is seen: every backward run inside the mode (``loss.backward()``, ``torch.autograd.
    backward`` or ``.grad``), whatever built its graph, the mode hooking the graph's
    convolutions as the backward starts; a graph built and backwarded inside another backward
    (reentrant checkpointing) is not. Convolutions that are not autograd's own (pypto.torch's
    operator) are not torch's grad_input and have no row.

    every: judge one call in ``every`` (1: all): in backward pass s, the calls j (counted from
    0 in that pass) with (j + s) % every == 0, so that ``every`` passes judge each layer once.
    A pass starts when the mode is entered and when a convolution's forward runs after a
    backward one. budget: at most
    this share of the time spent inside the mode goes to judging (0.3: 30%; None: no limit); a
    call is judged only while the judging so far is within it, counted over every ``with`` of
    the mode. Calls left out are listed as skipped, with why.

    images: judge this many images of each judged call's batch (None: all of them), other
    ones each time a call is judged, so that successive judgements of one layer (its position
    in the backward pass) go round the whole batch: the k-th judgement of a layer takes the
    images from k * images on, modulo the batch. The judging's cost falls by about the batch
    size over ``images`` (the float64 golden's GEMM and every element-wise pass; not the
    conversion of the weight). The price: an error confined to images left out this time is
    seen only when their turn comes (``every`` * batch / ``images`` passes for each layer to
    see each image once); a fault of the kernel's tiling repeats in every image and is seen at
    once. The row's ``images`` lists the images judged ("all" when every one was); its
    ``elements`` and its localisation count those images, named by their index in the batch.

    model: the ``torch.nn.Module`` being trained, to name each call's module in its row
    (``"layer3.1.conv2"``): the module whose forward ran the convolution (when the forward ran
    inside the mode), else the one owning the weight; None where neither is known.
    """

    def __init__(
        self,
        standard=_testing.DEFAULT_STANDARD,
        report=None,
        on_fail="warn",
        top=5,
        threads=1,
        keep_failures=4,
        every=1,
        budget=None,
        model=None,
        images=None,
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
            _calls.check_table_path(report, "crosscheck")  # a writable place; xlsx: openpyxl
        self.standard, self.report, self.on_fail = standard, report, on_fail
        self.top = check_top(top)
        self.threads = threads
        self.keep_failures = check_count(keep_failures, "keep_failures")
        self.every = _positive_int(every, "every")
        self.budget = _share(budget)
        self.images = None if images is None else _positive_int(images, "images")
        self._image_turns = {}  # position in the pass -> judgements of it so far (images=)
        self._key = f"pypto.crosscheck.{next(MODES)}"  # node.metadata: hooked by this mode
        if model is not None and not isinstance(model, torch.nn.Module):
            raise FeError(
                TypeError(f"model must be a torch.nn.Module or None, not {type(model).__name__}")
            )
        self._names = ModuleNames(model)
        self._pass = -1  # the backward pass, as the mode sees them (every's phase)
        self._pass_calls = 0  # convolution backward calls so far in this pass
        self._backward_seen = False
        self._inside = 0.0  # seconds spent inside the mode, over every with
        self._entered = None
        self._judging = 0.0  # seconds of judging, over every with
        self.rows = []
        self.failures = {}
        self._kept_failures = 0
        self._calls = 0

    # --- the mode ---------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in BACKWARDS:
            self._hook_graph(graph_roots(args, kwargs))
        out = func(*args, **kwargs)
        if func in CONVOLUTIONS:
            if self._backward_seen:
                self._next_pass()
            module = self._names.running()
            if module is not None and getattr(out, "grad_fn", None) is not None:
                out.grad_fn.metadata[MODULE_KEY] = module
        return out

    def _hook_graph(self, roots):
        """Hook each convolution node below ``roots`` that this mode has not hooked yet."""
        for node in convolution_nodes(roots):
            if self._key in node.metadata:
                continue
            try:
                call = call_of(node, node.metadata.get(MODULE_KEY))
            except RuntimeError:
                # its saved tensors are gone (a backward already ran through it): torch
                # raises if this backward needs it, and it has nothing for a hook otherwise
                continue
            node.metadata[self._key] = True
            node.register_hook(self._hook(call))

    def _hook(self, call):
        # the hook holds what the node saved, never the node itself (no cycle to keep the
        # graph alive)
        def judge_after_backward(grad_inputs, grad_outputs):
            if self._entered is not None:  # a graph hooked here may run after the mode ends
                self._judge(call, grad_outputs[0], grad_inputs[0])

        return judge_after_backward

    def _next_pass(self):
        self._pass += 1
        self._pass_calls = 0
        self._backward_seen = False

    def __enter__(self):
        self._next_pass()
        self._names.attach()
        self._entered = time.perf_counter()
        return super().__enter__()

    def __exit__(self, exc_type, exc_value, traceback):
        try:
            return super().__exit__(exc_type, exc_value, traceback)
        finally:
            self._names.detach()
            self._inside += time.perf_counter() - self._entered
            self._entered = None
            if self.report is not None:
                self.write(self.report)

    def _left_out(self, position):
        """Why the call at ``position`` of this pass is not judged (sampling, the time budget),
        or None."""
        if (position + self._pass) % self.every:
            return f"not sampled (every={self.every})"
        if self.budget is not None:
            inside = self._inside + time.perf_counter() - self._entered
            if self._judging > self.budget * inside:
                return (
                    f"over the time budget ({self._judging:.3g} s of judging in "
                    f"{inside:.3g} s, budget {self.budget:g})"
                )
        return None

    def _chosen_images(self, position, batch):
        """The images to judge of the call at ``position`` of its pass (a sorted list), or
        None for all: ``images`` of them from k * images on (modulo the batch) at the k-th
        judgement of that position."""
        if self.images is None or self.images >= batch:
            return None
        turn = self._image_turns.get(position, 0)
        self._image_turns[position] = turn + 1
        first = turn * self.images % batch
        return sorted((first + i) % batch for i in range(self.images))

    # --- one call ---------------------------------------------------------------------------
    def _judge(self, call, dy, dx):
        index = self._calls
        self._calls += 1
        position = self._pass_calls  # in this backward pass: every's sampling
        self._pass_calls += 1
        self._backward_seen = True
        w, padding = call.weight, call.padding
        stride, dilation, groups = call.stride, call.dilation, call.groups
        paddings = (
            [padding[0], padding[0], padding[1], padding[1]] if len(padding) == 2 else padding
        )
        module = call.module if call.module is not None else self._names.of(w)
        row = _calls.new_row(
            {"call": index, "module": module, "status": "skipped", "rule": None},
            {"images": None, "seconds": None},
            dtype=_dtype_name(dy.dtype),
            grad_output=list(dy.shape),
            weight=list(w.shape),
            grad_input=call.input_shape,
            strides=stride,
            paddings=paddings,
            dilations=dilation,
            groups=groups,
            standard=self.standard,
            elements=math.prod(call.input_shape),
        )
        self.rows.append(row)
        if dx is None:
            row["reason"] = "grad_input not asked for (output_mask[0] is False: no gradient wanted)"
            return
        if call.transposed:
            row["reason"] = (
                "transposed convolution: its grad_input is a forward convolution, not a dgrad"
            )
            return
        if any(call.output_padding):
            row["reason"] = f"output_padding {call.output_padding} (transposed only)"
            return
        empty = _without_data(dx, dy, w)
        if empty is not None:
            row["reason"] = f"{empty}: no data to judge"
            return
        left_out = self._left_out(position)
        if left_out is not None:
            row["reason"] = left_out
            return
        start = time.perf_counter()
        chosen = self._chosen_images(position, dy.shape[0])
        row["images"] = "all" if chosen is None else chosen
        shape = call.input_shape
        input_size = shape if chosen is None else [len(chosen), *shape[1:]]
        try:
            plan = _run_plan(
                list(dy.shape),
                list(w.shape),
                shape,  # the whole call's rules and tiles, whatever is judged of it
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
                    _images(_host(dx), chosen),
                    _images(_host(dy), chosen),
                    _host(w),
                    input_size,
                    stride,
                    paddings,
                    dilation,
                    tiles=tiles,
                    standard=self.standard,
                )
                if chosen is not None:
                    result.localisation.name_images(chosen)
                # the row's metrics (dot products among them) on the same threads: BLAS
                # threads woken here would spin against torch's next operators
                judged = _calls.judged(result)
        except PyptoError as exc:
            row["rule"] = getattr(exc, "rule", None)
            row["reason"] = str(exc)
            row["images"] = None  # nothing judged
            return
        finally:
            self._judging += time.perf_counter() - start
        row["seconds"] = round(time.perf_counter() - start, 6)
        row.update(judged)
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
