"""dgrad the textbook way in NumPy: one GEMM per image, then col2im.

Used by ``python -m pypto`` to check the kernel's numbers (in float64) and by the benchmark as
the NumPy peer (in float32). It shares no code with the Cython kernel: a different algorithm
(the full column matrix, scatter-add) so that agreement means something.
"""

import numpy as np

__all__ = ["dgrad_gemm_col2im", "gemm_col2im_bytes"]


def dgrad_gemm_col2im(dy, w, input_hw, strides, paddings, dilations, dtype=np.float64):
    """dx[N, Cin, Hin, Win] in ``dtype`` from dy [N, Cout, Hout, Wout] and w [Cout, Cin, Kh, Kw].

    ``paddings`` is [top, bottom, left, right]; only top and left place the result (bottom and
    right follow from Hin and Win).
    """
    dy = np.asarray(dy, dtype=dtype)
    w = np.asarray(w, dtype=dtype)
    n, cout, hout, wout = dy.shape
    _, cin, kh, kw = w.shape
    hin, win = input_hw
    sh, sw = strides
    dh, dw = dilations
    pt, pl = paddings[0], paddings[2]
    # The padded frame must hold every tap of every dy pixel and the whole cropped result.
    hp = max(pt + hin, (hout - 1) * sh + (kh - 1) * dh + 1)
    wp = max(pl + win, (wout - 1) * sw + (kw - 1) * dw + 1)
    w_t = w.reshape(cout, cin * kh * kw).T  # [Cin*Kh*Kw, Cout]
    dx = np.zeros((n, cin, hin, win), dtype=dtype)
    frame = np.empty((cin, hp, wp), dtype=dtype)
    # images in groups whose column matrix fits GROUP_BYTES: one GEMM over a group's pixels
    # (a 7x7 layer's 49 pixels alone leave the GEMM a third slower); one matrix for every
    # group: fresh pages for each would cost as much as its GEMM
    pixels = hout * wout
    group = images_per_gemm(n, cin * kh * kw, pixels, dy.itemsize)
    columns = np.empty((cin * kh * kw, group * pixels), dtype=dtype)
    for first in range(0, n, group):
        count = min(group, n - first)
        block = dy[first : first + count].reshape(count, cout, pixels)
        gemm = columns[:, : count * pixels]
        np.matmul(w_t, block.transpose(1, 0, 2).reshape(cout, count * pixels), out=gemm)
        for g in range(count):
            cols = gemm[:, g * pixels : (g + 1) * pixels].reshape(cin, kh, kw, hout, wout)
            frame.fill(0)
            for i in range(kh):
                for j in range(kw):
                    frame[
                        :,
                        i * dh : i * dh + (hout - 1) * sh + 1 : sh,
                        j * dw : j * dw + (wout - 1) * sw + 1 : sw,
                    ] += cols[:, i, j]
            dx[first + g] = frame[:, pt : pt + hin, pl : pl + win]
    return dx


GROUP_BYTES = 16 << 20  # a group of images' column matrix, at most (one image's may be larger)


def images_per_gemm(n, rows, pixels, itemsize):
    """How many images one GEMM takes: as many as keep the column matrix (``rows`` by their
    pixels) within GROUP_BYTES, at least one."""
    return max(1, min(n, GROUP_BYTES // max(1, rows * pixels * itemsize)))


def gemm_col2im_bytes(dy_shape, w_shape, input_hw, strides, dilations, itemsize=8):
    """Upper bound of what ``dgrad_gemm_col2im`` allocates: the converted inputs, dx, the
    padded frame, one group's column matrix and its copy of the group's dy."""
    n, cout, hout, wout = dy_shape
    _, cin, kh, kw = w_shape
    hin, win = input_hw
    hp = hin + (hout - 1) * strides[0] + (kh - 1) * dilations[0] + 1
    wp = win + (wout - 1) * strides[1] + (kw - 1) * dilations[1] + 1
    elements = (
        n * cout * hout * wout
        + cout * cin * kh * kw
        + n * cin * hin * win
        + cin * hp * wp
        + images_per_gemm(n, cin * kh * kw, hout * wout, itemsize)
        * (cin * kh * kw + cout)
        * hout
        * wout
    )
    return elements * itemsize
