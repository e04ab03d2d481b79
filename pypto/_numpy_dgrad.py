"""dgrad the textbook way in NumPy: one GEMM per image, then col2im.

Used by ``python -m pypto`` to check the kernel's numbers (in float64) and by the benchmark as
the NumPy peer (in float32). It shares no code with the Cython kernel: a different algorithm
(the full column matrix, scatter-add) so that agreement means something.
"""

import numpy as np

__all__ = ["dgrad_gemm_col2im"]


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
    w_t = w.reshape(cout, cin * kh * kw).T                       # [Cin*Kh*Kw, Cout]
    dx = np.zeros((n, cin, hin, win), dtype=dtype)
    frame = np.empty((cin, hp, wp), dtype=dtype)
    for img in range(n):
        cols = (w_t @ dy[img].reshape(cout, hout * wout)).reshape(cin, kh, kw, hout, wout)
        frame.fill(0)
        for i in range(kh):
            for j in range(kw):
                frame[:, i * dh:i * dh + (hout - 1) * sh + 1:sh,
                      j * dw:j * dw + (wout - 1) * sw + 1:sw] += cols[:, i, j]
        dx[img] = frame[:, pt:pt + hin, pl:pl + win]
    return dx
