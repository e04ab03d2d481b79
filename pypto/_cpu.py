"""The CPU backend: choose the kernel build for this CPU, lay the data out, run it.

One kernel module is built per ISA level (baseline, avx2, avx512, avx512_bf16); the best one
that both the build and the CPU have is used, unless ``PYPTO_CPU_ISA`` names a level.
"""

import importlib
import os

import numpy as np

from . import _config
from ._dtypes import DataType, numpy_dtype
from ._memory import check_host_memory
from .error import PyptoRtError

__all__ = ["conv_backward_input_cpu", "openmp_enabled", "kernel_info", "ISA_LEVELS"]

ISA_LEVELS = ("baseline", "avx2", "avx512", "avx512_bf16")
_KERNEL_DTYPE = {DataType.DT_FP16: 0, DataType.DT_BF16: 1}


def _built_levels():
    built = {}
    for level in ISA_LEVELS:
        try:
            built[level] = importlib.import_module(f"pypto._kernels._dgrad_{level}")
        except ImportError:
            pass
    if "baseline" not in built:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        raise ImportError(
            f"pypto's CPU kernel is not built in {here}: this looks like the source tree, "
            "imported because it is the current folder. Install with `pip install .` and run "
            "from another folder (or use the `pypto` command), or build in place with "
            "`pip install -e .`.")
    return built


def _choose(built, requested):
    runnable = [level for level in built["baseline"].cpu_levels() if level in built]
    if not requested:
        return built[runnable[-1]]
    if requested not in ISA_LEVELS:
        raise PyptoRtError(ValueError(f"PYPTO_CPU_ISA={requested!r}: expected one of {ISA_LEVELS}"))
    if requested not in runnable:
        raise PyptoRtError(RuntimeError(
            f"PYPTO_CPU_ISA={requested!r} cannot be used here: levels built and supported by this "
            f"CPU are {runnable}"))
    return built[requested]


_BUILT = _built_levels()
_KERNEL = _choose(_BUILT, os.environ.get("PYPTO_CPU_ISA", "").strip().lower())


def openmp_enabled():
    """True when the kernels were built with OpenMP."""
    return _KERNEL.openmp_enabled()


def kernel_info():
    """The kernel in use: ISA level, register block (MR x NR), OpenMP, bf16 dot product."""
    return {"isa": _KERNEL.ISA, "mr": _KERNEL.MR, "nr": _KERNEL.NR,
            "openmp": _KERNEL.openmp_enabled(), "bf16_dot": _KERNEL.HAS_BF16_DOT,
            "cpu_levels": _BUILT["baseline"].cpu_levels(), "built_levels": sorted(_BUILT)}


def _is_kernel_ready(array, np_dtype):
    flags = array.flags
    return array.dtype == np_dtype and flags.c_contiguous and flags.aligned


def _bits(array, np_dtype):
    """The array as C-contiguous, aligned, native 16-bit patterns.

    A copy only when the array is not already so: views with strides (negative too), Fortran
    order, byte-swapped or misaligned data are copied; the caller's array is never written.
    """
    if not _is_kernel_ready(array, np_dtype):
        array = np.require(array, dtype=np_dtype, requirements=["C_CONTIGUOUS", "ALIGNED"])
    return array.view(np.uint16)


def _vec_chunks(vec_tile, p):
    """(channels, columns) per write-out chunk from a 4-entry NCHW or 5-entry NCDHW vec tile,
    clipped to the problem (a chunk larger than its dimension is the whole dimension)."""
    return min(vec_tile[1], p.cin), min(vec_tile[-1], p.win)


def conv_backward_input_cpu(call, dy, w):
    """dx for a validated call (``pypto._validation.ValidatedCall``) from host arrays dy and w.

    Checks the memory the call needs against the limit before allocating anything.
    """
    p = call.problem
    kernel_tiles = call.tiling.kernel_tiles(p)
    threads = min(_config.get_num_threads(), call.tiling.cpu_work_items(p, kernel_tiles))
    np_dtype = numpy_dtype(call.dtype)
    copies = sum(a.size * 2 for a in (dy, w) if not _is_kernel_ready(a, np_dtype))
    # before any copy or allocation
    check_host_memory(call.tiling.cpu_memory_bytes(p, threads, kernel_tiles) + copies, p,
                      "weight panels, tile scratch and input copies")
    out = np.empty((p.n, p.cin, p.hin, p.win), dtype=np_dtype)
    _KERNEL.dgrad(_bits(dy, np_dtype), _bits(w, np_dtype), out.view(np.uint16),
                  _KERNEL_DTYPE[call.dtype], (p.sh, p.sw, p.pt, p.pl, p.dh, p.dw),
                  kernel_tiles, _vec_chunks(call.vec_tile, p), threads)
    return out
