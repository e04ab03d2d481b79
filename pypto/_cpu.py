"""The CPU backend: lay the data out for the Cython kernel and run it."""

import numpy as np

from . import _config
from ._dtypes import DataType, numpy_dtype
from ._kernels import _dgrad

__all__ = ["conv_backward_input_cpu", "openmp_enabled"]

_KERNEL_DTYPE = {DataType.DT_FP16: 0, DataType.DT_BF16: 1}


def openmp_enabled():
    """True when the kernels were built with OpenMP."""
    return _dgrad.openmp_enabled()


def _bits(array, dtype):
    """The array as C-contiguous native 16-bit patterns (a copy only when the layout needs one)."""
    array = np.ascontiguousarray(array, dtype=numpy_dtype(dtype))
    return array.view(np.uint16)


def _vec_chunks(vec_tile):
    """(channels, columns) per write-out chunk from a 4-entry NCHW or 5-entry NCDHW vec tile."""
    return vec_tile[1], vec_tile[-1]


def conv_backward_input_cpu(call, dy, w):
    """dx for a validated call (``pypto._validation.ValidatedCall``) from host arrays dy and w."""
    p = call.problem
    out = np.empty((p.n, p.cin, p.hin, p.win), dtype=numpy_dtype(call.dtype))
    _dgrad.dgrad(_bits(dy, call.dtype), _bits(w, call.dtype), out.view(np.uint16),
                 _KERNEL_DTYPE[call.dtype], (p.sh, p.sw, p.pt, p.pl, p.dh, p.dw),
                 call.tiling.kernel_tiles(p), _vec_chunks(call.vec_tile),
                 _config.get_num_threads())
    return out
