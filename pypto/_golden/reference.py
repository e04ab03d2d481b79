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
    # one column matrix for every image: fresh pages for each would cost as much as its GEMM
    columns = np.empty((cin * kh * kw, hout * wout), dtype=dtype)
    for img in range(n):
        np.matmul(w_t, dy[img].reshape(cout, hout * wout), out=columns)
        cols = columns.reshape(cin, kh, kw, hout, wout)
        frame.fill(0)
        for i in range(kh):
            for j in range(kw):
                frame[
                    :,
                    i * dh : i * dh + (hout - 1) * sh + 1 : sh,
                    j * dw : j * dw + (wout - 1) * sw + 1 : sw,
                ] += cols[:, i, j]
        dx[img] = frame[:, pt : pt + hin, pl : pl + win]
    return dx


def gemm_col2im_bytes(dy_shape, w_shape, input_hw, strides, dilations, itemsize=8):
    """Upper bound of what ``dgrad_gemm_col2im`` allocates: the converted inputs, dx, the
    padded frame and one image's column matrix."""
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
        + cin * kh * kw * hout * wout
    )
    return elements * itemsize
