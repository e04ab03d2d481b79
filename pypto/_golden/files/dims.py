"""The dimension order ("layout") a case's tensor is written in: pypto computes in NCHW, and a
case may describe its tensors in another of CANN's plain formats (an msOpST case in NHWC with an
HWCN filter, say). The letters name the roles: for activations N batch, C channels, H, W; for
the filter N the output channels, C the input channels, H and W the kernel's.
"""

import numpy as np

from .layout import case_error

__all__ = ["LAYOUTS", "NCHW", "check_layout", "shape_in", "shape_from", "array_in", "array_from"]

NCHW = "NCHW"
LAYOUTS = ("NCHW", "NHWC", "HWCN", "CHWN")


def check_layout(value, where):
    """``value`` when it is one of :data:`LAYOUTS`, else a PyptoError naming ``where``."""
    if value not in LAYOUTS:
        raise case_error(f"{where} must be one of {', '.join(LAYOUTS)}, but is {value!r}")
    return value


def _order(layout):
    """The NCHW axis each axis of ``layout`` holds."""
    return [NCHW.index(letter) for letter in layout]


def shape_in(shape, layout):
    """An NCHW shape in ``layout``'s order."""
    return [shape[axis] for axis in _order(layout)]


def shape_from(shape, layout):
    """A shape given in ``layout``'s order, in NCHW order."""
    nchw = [0] * 4
    for value, axis in zip(shape, _order(layout)):
        nchw[axis] = value
    return nchw


def array_in(array, layout):
    """An NCHW array in ``layout`` (C-contiguous: what is written to a file)."""
    return np.ascontiguousarray(array.transpose(_order(layout)))


def array_from(array, layout):
    """An array in ``layout``, in NCHW (C-contiguous: what the op and the judges take)."""
    order = _order(layout)
    return np.ascontiguousarray(array.transpose([order.index(axis) for axis in range(4)]))
