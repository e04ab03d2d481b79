"""The CPU backend's op: the kernel build chosen for this CPU (``loading``), the thread count
(fork, address-space limit, start probe), the data laid out for it, the call run.
"""

import os
import resource
import threading
import time
import warnings

import numpy as np

from .._core import options as _config
from .._core.bounded import remember
from .._core.locks import ForkSafeLock
from .._core.memory import address_space_room, check_host_memory, limit_set
from .._core.nonfinite import non_finite_mask, with_real_taps_only
from .._core.rules import check_host_arrays
from .._dtypes import DataType, numpy_dtype
from .amx import cached_verdict, tile_unit_state, tile_unit_usable
from .loading import (
    BUILT_LEVELS,
    CPU_FEATURES,
    CPU_LEVELS,
    ISA_LEVELS,
    chosen_reason,
    load_level,
    loaded_kernel,
)
from .loading import chosen_kernel as _kernel

__all__ = [
    "conv_backward_input_cpu",
    "openmp_enabled",
    "kernel_info",
    "measure_peak_gflops",
    "load_level",
    "release_kernel_buffers",
    "ISA_LEVELS",
]

_KERNEL_DTYPE = {DataType.DT_FP16: 0, DataType.DT_BF16: 1}
_BF16 = _KERNEL_DTYPE[DataType.DT_BF16]


# --- threads ----------------------------------------------------------------------------------
# libgomp ends the process when it cannot create a thread, and its thread pool does not survive
# fork: a child that enters a parallel region of more than one thread after its parent's pool
# served one waits forever. So a call never asks OpenMP for more threads than were just shown
# to start, and a child forked after the kernel ran on several threads runs on one. A fork
# waits for a thread probe in another thread (its threads would not exist in the child).
_lock = ForkSafeLock(held_across_fork=True)
_most_threads_run = 1  # the most threads a call has run on in this process (libgomp keeps them)
_forked_after_threads = False


def _after_fork_in_child():
    global _forked_after_threads
    _forked_after_threads = _forked_after_threads or _most_threads_run > 1


os.register_at_fork(after_in_child=_after_fork_in_child)


def _threads_that_start(wanted):
    """How many threads, this one included, can run (up to ``wanted``): starts the others idle,
    with the stack size OpenMP's threads will ask for, and ends them."""
    release, started = threading.Event(), []
    tasks_before = _task_count()
    stack = _omp_stack_request()
    try:  # (below Python's minimum, libgomp too keeps the default)
        previous = threading.stack_size(stack) if stack and stack >= 1 << 15 else None
    except (ValueError, OverflowError):  # too large to ask for at all
        return 1
    try:
        for _ in range(wanted - 1):
            thread = threading.Thread(target=release.wait, daemon=True)
            thread.start()
            started.append(thread)
    except RuntimeError:  # "can't start new thread": no memory or address space, or a limit
        pass
    finally:
        if previous is not None:
            threading.stack_size(previous)
        release.set()
        for thread in started:
            thread.join()
        # join() returns before the OS thread has exited and given back its stack: wait for
        # that, or OpenMP's threads would meet the probe's still in the address space
        deadline = time.monotonic() + 2.0
        while (
            tasks_before is not None
            and _task_count() > tasks_before
            and time.monotonic() < deadline
        ):
            time.sleep(0.001)
    return len(started) + 1


def _task_count():
    """Threads of this process now (Linux), or None."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


_STACK_UNITS = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _omp_stack_request():
    """The stack size libgomp gives its threads, as it reads it: OMP_STACKSIZE, else
    GOMP_STACKSIZE, each a number with an optional B/K/M/G suffix (default K); a value it
    cannot parse is ignored (None: the system default, as Python's threads get)."""
    for name in ("OMP_STACKSIZE", "GOMP_STACKSIZE"):
        text = os.environ.get(name, "").strip().upper()
        unit = _STACK_UNITS.get(text[-1:])
        digits = (text[:-1] if unit else text).strip()
        if digits.isdigit() and digits.isascii():
            return int(digits) * (unit or 1 << 10)
    return None


def _thread_stack_bytes():
    """The stack an OpenMP thread gets: as requested, else glibc's default (RLIMIT_STACK)."""
    requested = _omp_stack_request()
    if requested:
        return requested
    soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
    return 32 << 20 if soft == resource.RLIM_INFINITY else soft


_ADDRESS_SLACK = 64 << 20  # for malloc arenas, guard pages and the interpreter's own needs


def _usable_threads(wanted, shared_bytes, per_thread_bytes, room):
    """``wanted``, or fewer when this process cannot run that many OpenMP threads: the
    address-space limit leaves room for fewer (each thread needs its stack and its scratch),
    or fewer start. ``room``: what ``address_space_room()`` said for this call."""
    global _most_threads_run
    if _forked_after_threads:
        return 1
    if room is not None and wanted > 1:
        fit = 1 + max(0, room - _ADDRESS_SLACK - shared_bytes - per_thread_bytes) // (
            per_thread_bytes + _thread_stack_bytes()
        )
        if fit < wanted:
            warnings.warn(
                f"pypto: the address-space limit (ulimit -v) leaves room for {fit} of "
                f"the {wanted} threads asked for; running on {fit}",
                RuntimeWarning,
                stacklevel=4,
            )
            wanted = fit
    if wanted > _most_threads_run:
        with _lock:
            can = _threads_that_start(wanted)
            if can < wanted:
                stack = _omp_stack_request()
                warnings.warn(
                    f"pypto: only {can} of the {wanted} threads asked for could be "
                    f"started"
                    + (
                        f" with the {stack}-byte stacks OMP_STACKSIZE / GOMP_STACKSIZE ask for"
                        if stack
                        else ""
                    )
                    + f"; running on {can}",
                    RuntimeWarning,
                    stacklevel=4,
                )
            wanted = can
            _most_threads_run = max(_most_threads_run, wanted)
    return wanted


def openmp_enabled():
    """True when the kernels were built with OpenMP."""
    return _kernel().openmp_enabled()


def kernel_info():
    """The kernel in use: ISA level and why, register block (MR x NR), OpenMP, bf16 dot product;
    the levels built and the levels this CPU supports; the CPU features read."""
    kernel = _kernel()
    return {
        "isa": kernel.ISA,
        "reason": chosen_reason(),
        "mr": kernel.MR,
        "nr": kernel.NR,
        "openmp": kernel.openmp_enabled(),
        "bf16_dot": kernel.HAS_BF16_DOT,
        "bf16_sum_order": _config.bf16_sum_order_now(),
        "amx": getattr(kernel, "HAS_AMX", False),
        "tile_unit": _tile_unit_line(kernel),
        "cpu_levels": list(CPU_LEVELS),
        "built_levels": list(BUILT_LEVELS),
        "cpu_features": sorted(name for name, on in CPU_FEATURES.items() if on),
    }


def _tile_unit_line(kernel):
    """How sum_order "tile" runs here, for ``pypto info`` (asks the OS nothing)."""
    if not getattr(kernel, "HAS_AMX", False):
        return f"emulated ({kernel.ISA} has no AMX tile unit)"
    state = tile_unit_state()
    if state is None:
        known = cached_verdict(kernel)
        return "AMX tiles once the first bf16 call in this order has the OS's permission" + (
            " and the self-check's verdict (not run yet)"
            if known is None
            else f" (self-check cached: {'passed' if known['passed'] else 'FAILED'}, "
            f"{known['summary']})"
        )
    return ("AMX tiles: " if state[0] else "emulated: ") + state[1]


def measure_peak_gflops(threads, kind="madd", seconds=0.3):
    """Measured peak GFLOP/s of the kernel level in use on ``threads`` threads at once: the best
    of three runs of a register-resident loop (``_kernels/kernel/pypto_peak.h``), each about
    ``seconds`` / 3 long. ``kind``: "madd" (fp32 multiply-add, FMA where the level has it) or
    "bf16_dot" (None on levels without the bf16 dot product)."""
    if kind not in ("madd", "bf16_dot"):
        raise ValueError(f"kind must be 'madd' or 'bf16_dot', not {kind!r}")
    if not (isinstance(threads, int) and 1 <= threads <= _config.MAX_THREADS):
        raise ValueError(f"threads must be an int in [1, {_config.MAX_THREADS}], not {threads!r}")
    kernel = _kernel()
    if kind == "bf16_dot" and not kernel.HAS_BF16_DOT:
        return None
    iterations = 1 << 12
    while True:  # long enough to time: about a third of the budget per run
        flops, took = kernel.peak_flops(kind, threads, iterations)
        if took >= seconds / 3 or iterations >= 1 << 40:
            break
        iterations = int(iterations * min(64.0, max(2.0, seconds / 3 / max(took, 1e-9))))
    runs = [flops / took] + [
        f / t for f, t in (kernel.peak_flops(kind, threads, iterations) for _ in range(2))
    ]
    return max(runs) / 1e9


def release_kernel_buffers():
    """Free the weight-panel and scratch buffers the CPU kernel keeps for its next call (none
    when no call has run)."""
    kernel = loaded_kernel()
    if kernel is not None:
        kernel.release_buffers()


def _is_kernel_ready(array, np_dtype):
    flags = array.flags
    dtype = array.dtype
    return (dtype is np_dtype or dtype == np_dtype) and flags.c_contiguous and flags.aligned


def _is_exact(array, np_dtype, shape):
    """True for a plain ndarray of the call's shape that the kernel can read as it is: what
    check_host_arrays returns unchanged and _is_kernel_ready accepts."""
    return type(array) is np.ndarray and array.shape == shape and _is_kernel_ready(array, np_dtype)


def _kernel_copy(array, np_dtype):
    """A C-contiguous, aligned, native copy of an array that _is_kernel_ready refuses: views
    with strides (negative too), Fortran order, byte-swapped or misaligned data. The caller's
    array is never written; the kernel reads the copy's bytes as 16-bit patterns."""
    return np.require(array, dtype=np_dtype, requirements=["C_CONTIGUOUS", "ALIGNED"])


def _vec_chunks(vec_tile, p):
    """(channels, columns) per write-out chunk from a 4-entry NCHW or 5-entry NCDHW vec tile,
    clipped to the problem (a chunk larger than its dimension is the whole dimension)."""
    return min(vec_tile[1], p.cin), min(vec_tile[-1], p.win)


class _CallPlan:
    """What a validated call hands the kernel, worked out once per (problem, tiles, vector tile,
    dtype) and kept (``_plan_of``): the kernel's tiles and arguments, and its buffer sizes per
    thread count."""

    __slots__ = (
        "kernel_tiles",
        "vec_chunks",
        "shapes",
        "attrs",
        "dtype",
        "np_dtype",
        "output_bytes",
        "_bytes",
        "_tile_bytes",
        "call",
    )

    def __init__(self, call):
        p = call.problem
        self.call = call
        self.kernel_tiles = call.tiling.kernel_tiles(p)
        self.vec_chunks = _vec_chunks(call.vec_tile, p)
        self.shapes = (
            (p.n, p.cout, p.hout, p.wout),
            (p.cout, p.cin, p.kh, p.kw),
            (p.n, p.cin, p.hin, p.win),
        )
        self.attrs = (p.sh, p.sw, p.pt, p.pl, p.dh, p.dw)
        self.dtype = _KERNEL_DTYPE[call.dtype]
        self.np_dtype = numpy_dtype(call.dtype)
        self.output_bytes = p.n * p.cin * p.hin * p.win * p.dtype_size
        self._bytes = {}
        self._tile_bytes = None

    def buffer_bytes(self, kernel, threads):
        """(shared, per_thread, threads that get scratch): the kernel's own plan's sizes."""
        sizes = self._bytes.get(threads)
        if sizes is None:
            sizes = kernel.buffer_bytes(
                *self.shapes, self.dtype, self.attrs, self.kernel_tiles, threads
            )
            self._bytes[threads] = sizes
        return sizes

    def tile_buffer_bytes(self, kernel):
        """Bytes of sum_order "tile"'s packed weight and dy frames (shared by the team)."""
        if self._tile_bytes is None:
            self._tile_bytes = kernel.tile_buffer_bytes(*self.shapes, self.attrs)
        return self._tile_bytes

    def for_call(self, call):
        """This plan for an equal ValidatedCall object (sharing the buffer sizes found)."""
        plan = _CallPlan.__new__(_CallPlan)
        for name in self.__slots__:
            setattr(plan, name, getattr(self, name))
        plan.call = call
        return plan


_PLANS = {}
_PLANS_MAX = 256  # as many as the rules remember (pypto._core.rules._PASSED_MAX)
# the plan of the ValidatedCall object a repeated call gets back from the rules' cache, found
# by the object's id: hashing the call's fields took a tenth of a small call's Python side.
# The plan holds the call, so no other object can have that id while the entry lives.
_PLAN_OF_CALL = {}


def _plan_of(call):
    plan = _PLAN_OF_CALL.get(id(call))
    if plan is not None and plan.call is call:
        return plan
    key = (call.problem, call.tiling, call.vec_tile, call.dtype)
    plan = _PLANS.get(key)
    if plan is None:
        plan = remember(_PLANS, key, _CallPlan(call), _PLANS_MAX)
    elif plan.call is not call:  # an equal call: its plan, held for this object
        plan = plan.for_call(call)
    return remember(_PLAN_OF_CALL, id(call), plan, _PLANS_MAX)


def conv_backward_input_cpu(call, dy, w):
    """dx for a validated call (``pypto._core.rules.ValidatedCall``) from host arrays dy and w.

    Checks the memory the call needs against the limit before allocating anything.
    """
    p = call.problem
    plan = _plan_of(call)
    np_dtype = plan.np_dtype
    if _is_exact(dy, np_dtype, plan.shapes[0]) and _is_exact(w, np_dtype, plan.shapes[1]):
        # every small call: what check_host_arrays returns unchanged and the kernel reads as is
        dy_ready = w_ready = True
        copies = 0
    else:
        dy, w = check_host_arrays(p, dy, w, call.dtype)
        dy_ready, w_ready = _is_kernel_ready(dy, np_dtype), _is_kernel_ready(w, np_dtype)
        copies = (0 if dy_ready else dy.size * 2) + (0 if w_ready else w.size * 2)
    output = plan.output_bytes
    # read once: each check below and the thread count use them
    room = address_space_room()
    limited = limit_set(room)
    # the output and copies first: a call refused for them never loads the kernel module
    check_host_memory(
        output + copies, p, "input copies, before the kernel's buffers", room, limited
    )
    # The kernel's own plan sizes its buffers (weight panels, tile scratch); per thread they are
    # largest with one thread, where image groups are largest.
    kernel = _kernel()
    tile_order = plan.dtype == _BF16 and _config.bf16_sum_order_now() == "tile"
    if tile_order:  # packed weight and frames shared; each thread's C in the same scratch
        shared, per_thread, used = plan.tile_buffer_bytes(kernel), kernel.TILE_THREAD_BYTES, 1
    else:
        shared, per_thread, used = plan.buffer_bytes(kernel, 1)
    # the whole team every call, even for fewer work items than threads: the same team size
    # every time, so no call starts or ends a thread (see the kernel's plan; a call below its
    # SERIAL_MACS runs on the calling thread alone, as buffer_bytes's thread count says)
    threads = _usable_threads(
        _config.num_threads_now(), output + shared + per_thread + copies, per_thread, room
    )
    if threads != 1 and tile_order:
        used = threads
    elif threads != 1:
        shared, per_thread, used = plan.buffer_bytes(kernel, threads)
    # before any copy or allocation
    check_host_memory(
        output + shared + used * per_thread + copies,
        p,
        "weight panels, tile scratch and input copies",
        room,
        limited,
    )
    out = np.empty(plan.shapes[2], dtype=np_dtype)
    dy_k = dy if dy_ready else _kernel_copy(dy, np_dtype)
    w_k = w if w_ready else _kernel_copy(w, np_dtype)
    if tile_order:
        path = kernel.dgrad_tile(dy_k, w_k, out, plan.attrs, threads, tile_unit_usable(kernel))
    else:
        path = kernel.dgrad(
            dy_k, w_k, out, plan.dtype, plan.attrs, plan.kernel_tiles, plan.vec_chunks, threads
        )
    if path == "non_finite":  # the kernel's scan of the weight found Inf/NaN; nothing written
        del out  # the recomputation makes its own: not two outputs at once
        return with_real_taps_only(
            conv_backward_input_cpu, call, dy, w, non_finite_mask(w, call.dtype)
        )
    return out
