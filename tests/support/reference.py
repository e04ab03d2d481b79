"""Independent float64 oracle for conv_backward_input (dgrad), plus fp16/bf16 grid helpers.

Written plainly in NumPy from the definition in the specification (section 1); imports nothing
from pypto, so a bug in the package cannot hide in its own reference.

    dx[n, ci, hi, wi] = sum over co, kh, kw and the (ho, wo) with
                        ho*sh - pt + kh*dh == hi,  0 <= ho < Hout,
                        wo*sw - pl + kw*dw == wi,  0 <= wo < Wout
                        of dy[n, co, ho, wo] * w[co, ci, kh, kw]

For a fixed tap (kh, kw) the dy pixel (ho, wo) lands on dx pixel
(ho*sh - pt + kh*dh, wo*sw - pl + kw*dw): a strided slice. We scatter-add each tap's
contribution into a zero-padded float64 buffer and crop the padding off at the end.
"""

import numpy as np

try:  # ml_dtypes is only needed to turn float64 into bf16 *arrays*; the rounding is ours
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    ml_dtypes = None
    BF16 = None

FP16 = np.dtype(np.float16)

# (precision p in bits incl. the hidden one, emin = exponent of the smallest normal, emax)
_FORMATS = {
    "fp16": (11, -14, 15),
    "bf16": (8, -126, 127),
}


def _fmt(dtype):
    """'fp16' or 'bf16' from a NumPy dtype or a name."""
    if isinstance(dtype, str):
        return {"fp16": "fp16", "float16": "fp16", "bf16": "bf16", "bfloat16": "bf16"}[dtype]
    dt = np.dtype(dtype)
    if dt == FP16:
        return "fp16"
    if BF16 is not None and dt == BF16:
        return "bf16"
    raise ValueError(f"unsupported dtype {dtype!r}")


def _f64(a):
    return np.asarray(a).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# The oracle
# ---------------------------------------------------------------------------------------------
def _scatter_taps(dy, w, input_hw, strides, pads_hw, dilations):
    """Float64 dgrad of (dy, w): the loop over taps, each a strided slice-add."""
    dy = _f64(dy)
    w = _f64(w)
    n, cout, hout, wout = dy.shape
    cout_w, cin, kh_n, kw_n = w.shape
    assert cout == cout_w, (dy.shape, w.shape)
    hin, win = input_hw
    sh, sw = strides
    pt, pl = pads_hw
    dh, dw = dilations
    # Padded dx buffer: pixel hi lives at row hi + pt. Make it big enough for every landing
    # position, including the ones beyond Hin that the crop throws away.
    hbuf = max(hin + pt, (hout - 1) * sh + (kh_n - 1) * dh + 1)
    wbuf = max(win + pl, (wout - 1) * sw + (kw_n - 1) * dw + 1)
    buf = np.zeros((n, cin, hbuf, wbuf), dtype=np.float64)
    for kh in range(kh_n):
        for kw in range(kw_n):
            # this tap's contribution: [n,ci,ho,wo] = sum_co dy[n,co,ho,wo] * w[co,ci,kh,kw]
            contrib = np.einsum("nohw,oc->nchw", dy, w[:, :, kh, kw])
            r0 = kh * dh  # = (ho=0)*sh - pt + kh*dh, shifted by +pt
            c0 = kw * dw
            buf[:, :, r0 : r0 + (hout - 1) * sh + 1 : sh, c0 : c0 + (wout - 1) * sw + 1 : sw] += (
                contrib
            )
    return buf[:, :, pt : pt + hin, pl : pl + win]


def dgrad_reference(dy, w, input_hw, strides, pads_hw, dilations):
    """dx in float64 (shape [N, Cin, Hin, Win]); pads_hw = (pad_top, pad_left), symmetric."""
    return np.ascontiguousarray(_scatter_taps(dy, w, input_hw, strides, pads_hw, dilations))


def dgrad_brute_force(dy, w, input_hw, strides, pads_hw, dilations):
    """The same dgrad as a plain loop over (ho, wo, kh, kw), for any integer padding (negative
    too): dx[.., ho*sh - pt + kh*dh, wo*sw - pl + kw*dw] += dy[.., ho, wo] @ w[.., kh, kw]."""
    dy, w = _f64(dy), _f64(w)
    n, _, hout, wout = dy.shape
    _, cin, kh_n, kw_n = w.shape
    dx = np.zeros((n, cin) + tuple(input_hw))
    for ho in range(hout):
        for wo in range(wout):
            for kh in range(kh_n):
                for kw in range(kw_n):
                    hi = ho * strides[0] - pads_hw[0] + kh * dilations[0]
                    wi = wo * strides[1] - pads_hw[1] + kw * dilations[1]
                    if 0 <= hi < input_hw[0] and 0 <= wi < input_hw[1]:
                        dx[:, :, hi, wi] += dy[:, :, ho, wo] @ w[:, :, kh, kw]
    return dx


def dgrad_abs_reference(dy, w, input_hw, strides, pads_hw, dilations):
    """sum |dy * w| over the terms of each dx element (the scale of the accumulation error)."""
    return dgrad_reference(np.abs(_f64(dy)), np.abs(_f64(w)), input_hw, strides, pads_hw, dilations)


def conv2d_forward_reference(x, w, strides, pads_hw, dilations, out_hw=None):
    """Forward conv (groups=1, no bias) in float64, from the spec's definition, by gathering.

    y[n, co, ho, wo] = sum_{ci,kh,kw} x[n, ci, ho*sh - pt + kh*dh, wo*sw - pl + kw*dw]
                                      * w[co, ci, kh, kw]
    with out-of-range x treated as 0 (padding pt/pl each side; pb = pt, pr = pl).
    """
    x = _f64(x)
    w = _f64(w)
    n, cin, hin, win = x.shape
    cout, cin_w, kh_n, kw_n = w.shape
    assert cin == cin_w
    sh, sw = strides
    pt, pl = pads_hw
    dh, dw = dilations
    if out_hw is None:
        hout = (hin + 2 * pt - dh * (kh_n - 1) - 1) // sh + 1
        wout = (win + 2 * pl - dw * (kw_n - 1) - 1) // sw + 1
    else:
        hout, wout = out_hw
    hbuf = max(hin + 2 * pt, (hout - 1) * sh + (kh_n - 1) * dh + 1)
    wbuf = max(win + 2 * pl, (wout - 1) * sw + (kw_n - 1) * dw + 1)
    xp = np.zeros((n, cin, hbuf, wbuf), dtype=np.float64)
    xp[:, :, pt : pt + hin, pl : pl + win] = x
    y = np.zeros((n, cout, hout, wout), dtype=np.float64)
    for kh in range(kh_n):
        for kw in range(kw_n):
            r0, c0 = kh * dh, kw * dw
            patch = xp[:, :, r0 : r0 + (hout - 1) * sh + 1 : sh, c0 : c0 + (wout - 1) * sw + 1 : sw]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, kh, kw])
    return y


# ---------------------------------------------------------------------------------------------
# The fp16 / bf16 grids
# ---------------------------------------------------------------------------------------------
def _exponent(v, emin):
    """floor(log2 |v|) for finite v, clipped below at emin (subnormals, zero share emin)."""
    a = np.abs(v)
    with np.errstate(divide="ignore"):
        _, e = np.frexp(a)  # a = m * 2**e with m in [0.5, 1): floor(log2 a) = e - 1
    e = e.astype(np.int64) - 1
    return np.where(a == 0, emin, np.maximum(e, emin))


def ulp(values, dtype):
    """Spacing of the fp16/bf16 grid at each value (float64 array).

    fp16: np.spacing of the value as float16 (2**-24 below the normals); at the top binade
    (65504 has no finite successor, spacing says inf) it is 2**(15-10) = 32.
    bf16: 2**(floor(log2|v|) - 7), never below the subnormal step 2**-133.
    Non-finite values get inf.
    """
    v = _f64(values)
    fmt = _fmt(dtype)
    p, emin, emax = _FORMATS[fmt]
    finite = np.isfinite(v)
    vv = np.where(finite, v, 0.0)
    if fmt == "fp16":
        with np.errstate(over="ignore", invalid="ignore"):
            h = np.abs(vv).astype(np.float16)
            sp = np.spacing(h).astype(np.float64)
        sp = np.where(np.isfinite(sp), sp, 2.0 ** (emax - (p - 1)))
        # |v| between 65504 and 65520 casts to inf for the spacing query: the top binade's ulp.
        sp = np.where(np.abs(vv) >= 65504.0, 2.0 ** (emax - (p - 1)), sp)
    else:
        e = np.minimum(_exponent(vv, emin), emax)
        sp = np.ldexp(1.0, (e - (p - 1)).astype(np.int64))
    return np.where(finite, sp, np.inf)


def round_once_f64(x64, dtype):
    """float64 -> nearest fp16/bf16 value, ties to even, ONE rounding, returned as float64.

    Exact: q = the grid step at x (a power of two), x/q is exact, np.rint rounds half to even,
    and rint(x/q)*q is exact. Overflow: beyond the largest finite value it rounds to +-inf
    exactly when |x| >= max + ulp/2 (RNE's overflow threshold: 65520 for fp16).
    """
    x = _f64(x64)
    fmt = _fmt(dtype)
    p, emin, emax = _FORMATS[fmt]
    finite = np.isfinite(x)
    xf = np.where(finite, x, 0.0)
    e = _exponent(xf, emin)
    q = np.ldexp(1.0, (e - (p - 1)).astype(np.int64))
    r = np.rint(xf / q) * q
    largest = (2.0 - 2.0 ** (1 - p)) * 2.0**emax
    r = np.where(np.abs(r) > largest, np.copysign(np.inf, xf), r)
    # keep the sign of zero (-tiny rounds to -0)
    r = np.where(r == 0, np.copysign(0.0, xf), r)
    return np.where(finite, r, x)


def round_once(x64, dtype):
    """float64 -> fp16 or bf16 array with a single round-to-nearest-even (see round_once_f64).

    The result value is computed by our own exact rounding and only then stored in the target
    type (exactly representable, so the final cast cannot round again).
    """
    r = round_once_f64(x64, dtype)
    target = FP16 if _fmt(dtype) == "fp16" else BF16
    with np.errstate(over="ignore"):
        out = r.astype(target)
    assert np.array_equal(out.astype(np.float64), r, equal_nan=True)
    return out
