"""Host re-layout between NCHW and the formats the AscendC kernel reads and writes.

NC1HWC0: channels split in blocks of C0 = 16 (zero-padded), the block innermost:
``x[n, c, h, w] -> x5[n, c // 16, h, w, c % 16]``. FRACTAL_Z (FRACTAL_Z_3D with D = 1) for the
forward weight ``w[co, ci, kh, kw]``: ``[ci // 16][kh][kw][co // 16][co % 16][ci % 16]``.
"""

import numpy as np

from .._core.tiling import C0, ceil_div

__all__ = ["dy_to_nc1hwc0", "weight_to_fractal_z", "nc1hwc0_to_nchw"]


def _copy_range(first, count, size):
    """(source slice, destination slice) of the part of [first, first + count) inside [0, size)."""
    lo, hi = max(first, 0), min(first + count, size)
    return slice(lo, hi), slice(lo - first, hi - first)


def dy_to_nc1hwc0(dy, rows, cols):
    """dy ``[N, Cout, Hout, Wout]`` -> ``[N, Cout1, rows.count, cols.count, 16]``.

    ``rows``/``cols`` (``.first``, ``.count``) select the dy window a launch reads; the parts of it
    outside dy (a zero halo) and the padded channels are zero.
    """
    n, cout, hout, wout = dy.shape
    cout1 = ceil_div(cout, C0)
    window = np.zeros((n, cout1 * C0, rows.count, cols.count), dtype=dy.dtype)
    src_h, dst_h = _copy_range(rows.first, rows.count, hout)
    src_w, dst_w = _copy_range(cols.first, cols.count, wout)
    window[:, :cout, dst_h, dst_w] = dy[:, :, src_h, src_w]
    return np.ascontiguousarray(
        window.reshape(n, cout1, C0, rows.count, cols.count).transpose(0, 1, 3, 4, 2)
    )


def weight_to_fractal_z(w):
    """Forward weight ``[Cout, Cin, Kh, Kw]`` -> ``[Cin1, Kh, Kw, Cout1, 16 (co), 16 (ci)]``."""
    cout, cin, kh, kw = w.shape
    cout1, cin1 = ceil_div(cout, C0), ceil_div(cin, C0)
    padded = np.zeros((cout1 * C0, cin1 * C0, kh, kw), dtype=w.dtype)
    padded[:cout, :cin] = w
    return np.ascontiguousarray(
        padded.reshape(cout1, C0, cin1, C0, kh, kw).transpose(2, 4, 5, 0, 1, 3)
    )


def nc1hwc0_to_nchw(x5, channels):
    """``[N, C1, H, W, 16]`` -> ``[N, channels, H, W]`` (the channel padding dropped)."""
    n, c1, h, w, _ = x5.shape
    return x5.transpose(0, 1, 4, 2, 3).reshape(n, c1 * C0, h, w)[:, :channels]
