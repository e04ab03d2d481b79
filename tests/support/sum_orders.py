"""Plain NumPy models of pypto's bf16 summation orders, bit for bit: what every ISA level (and
the AMX tile unit) must reproduce. Imports nothing from pypto.

``tile`` (sum_order="tile"): per output element, Cout padded with zero channels to blocks of
32; for each block (ascending) and each tap (kh, kw) (ascending):
    E = fp32 FMA chain from +0 over the block's even channels (32b, 32b+2, ..., 32b+30)
    O = the same over the odd channels (32b+1, ..., 32b+31)
    C = C + (E + O)             (fp32, C from +0)
then one round-to-nearest-even to bf16: the Intel SDM's TDPBF16PS, one instruction per (block,
tap), in IEEE arithmetic (no flush of subnormals).

A tap that reads no dy pixel for an output element (padding, or not in its stride phase)
contributes products of +0 here; the kernel skips such taps. The same bits: the chains then
stay +0, and C + (+0) leaves C's bits since C is never -0.
"""

import ml_dtypes
import numpy as np

BLOCK = 32


def _fma32(a, b, c):
    """float32(a * b + c) with one rounding, elementwise: the product is exact in float64 (two
    bf16 have 8-bit significands), the float64 sum is checked exact (TwoSum), so the one
    cast to float32 is the FMA's rounding."""
    c64 = c.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # Inf x 0, Inf - Inf: NaN, as IEEE says
        p = a.astype(np.float64) * b.astype(np.float64)
        s = c64 + p
        bb = s - c64
        err = (c64 - (s - bb)) + (p - bb)
        exact = ~np.isfinite(s) | (err == 0)
        assert exact.all(), "the model's float64 sum rounded: data outside its exact range"
        return s.astype(np.float32)


def _shifted(dy, hin, win, strides, pads, dilations, kh, kw):
    """dy's value at each dx pixel for tap (kh, kw): (N, Cout, Hin, Win), 0 where none."""
    n, cout, hout, wout = dy.shape
    sh, sw = strides
    pt, pl = pads
    dh, dw = dilations
    out = np.zeros((n, cout, hin, win), np.float32)
    for hi in range(hin):
        y = hi + pt - kh * dh
        if y % sh or not 0 <= y // sh < hout:
            continue
        for wi in range(win):
            x = wi + pl - kw * dw
            if x % sw or not 0 <= x // sw < wout:
                continue
            out[:, :, hi, wi] = dy[:, :, y // sh, x // sw]
    return out


def dgrad_tile_order(dy, w, input_hw, strides, pads_hw, dilations):
    """bf16 dx of bf16 dy (N, Cout, Hout, Wout) and w (Cout, Cin, Kh, Kw) in the tile order.
    pads_hw: (top, left), as the kernel reads them."""
    dy32 = np.asarray(dy).astype(np.float32)
    w32 = np.asarray(w).astype(np.float32)
    n, cout = dy32.shape[:2]
    _, cin, kh_n, kw_n = w32.shape
    hin, win = input_hw
    blocks = -(-cout // BLOCK)
    c = np.zeros((n, cin, hin, win), np.float32)
    taps = [
        (kh, kw, _shifted(dy32, hin, win, strides, pads_hw, dilations, kh, kw))
        for kh in range(kh_n)
        for kw in range(kw_n)
    ]
    for b in range(blocks):
        for kh, kw, a_rows in taps:
            e = np.zeros_like(c)
            o = np.zeros_like(c)
            for k in range(BLOCK):
                co = b * BLOCK + k
                if co >= cout:
                    break  # zero channels: products +0, chains unchanged
                product_of = (w32[co, :, kh, kw][None, :, None, None], a_rows[:, co : co + 1])
                if k % 2 == 0:
                    e = _fma32(*product_of, e)
                else:
                    o = _fma32(*product_of, o)
            with np.errstate(invalid="ignore", over="ignore"):
                c = c + (e + o)
    with np.errstate(over="ignore"):
        return c.astype(ml_dtypes.bfloat16)
