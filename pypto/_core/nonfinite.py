"""Inf and NaN in the weight: only real taps contribute, as the definition (and PyTorch) says.

The kernels (CPU and NPU) multiply a zero halo around dy by the weight. With finite weights that
adds zeros, but 0 * Inf is NaN, so an Inf or NaN weight would poison outputs that it reaches
only through padding or past the image edge. So when the weight holds a non-finite value, the
kernel runs with those entries zeroed, which is right wherever no non-finite product lands;
the input channels of those entries are then recomputed from the definition, over real taps
only, in float64, and every output that comes out Inf or NaN there takes that value. (float64
cannot overflow on fp16/bf16 products; the kernel's fp32 sums of bf16 can, see the error
bound's caveat.)
"""

import numpy as np

from .._dtypes import DataType
from .memory import check_host_memory

__all__ = ["non_finite_mask", "with_real_taps_only", "recompute_bytes"]

_EXPONENT_BITS = {DataType.DT_FP16: 0x7C00, DataType.DT_BF16: 0x7F80}


def non_finite_mask(w, dtype):
    """A boolean mask of w's Inf/NaN entries, or None when all are finite (the common case,
    checked on the 16-bit patterns when w is laid out natively). (The CPU kernel checks in its
    own pass over the weight and calls this only when it found some.)"""
    if w.dtype.isnative and w.flags.c_contiguous and w.flags.aligned:
        exponent = _EXPONENT_BITS[dtype]
        bits = w.view(np.uint16).reshape(-1)
        if not (np.bitwise_and(bits, exponent) == exponent).any():
            return None
    elif np.isfinite(w).all():
        return None
    return ~np.isfinite(w)


# Bytes per output element of one channel chunk of the recomputation, all alive at once: the
# float64 sums, einsum's float64 result for a tap, the non-finite mask (and its negation), the
# chunk of the result (a copy, 2 bytes) and the float64 values that land plus their rounding.
_CHUNK_BYTES_PER_ELEMENT = 8 + 8 + 2 + 2 + 8 + 2
_CHUNK_BUDGET = 64 << 20  # channels are recomputed in chunks of about this many bytes


def _chunk_channels(p):
    """Input channels recomputed together: as many as fit the chunk budget, at least one."""
    per_channel = p.n * p.hin * p.win * _CHUNK_BYTES_PER_ELEMENT
    return max(1, min(p.cin, _CHUNK_BUDGET // max(per_channel, 1)))


def recompute_bytes(p, dy_size, w_size):
    """The most the recomputation holds at once, besides what ``compute`` needs for itself:
    the result, the weight with its non-finite entries zeroed, dy in float64, one chunk."""
    chunk = _chunk_channels(p)
    return (
        p.n * p.cin * p.hin * p.win * p.dtype_size
        + w_size * p.dtype_size
        + 8 * dy_size
        + 8 * p.cout * chunk * p.kh * p.kw
        + p.n * chunk * p.hin * p.win * _CHUNK_BYTES_PER_ELEMENT
    )


def with_real_taps_only(compute, call, dy, w, mask):
    """``compute(call, dy, w)`` for a weight with Inf/NaN entries (``mask``)."""
    p = call.problem
    check_host_memory(
        recompute_bytes(p, dy.size, w.size),
        p,
        "a float64 recomputation of the channels with Inf/NaN weights",
    )
    out = compute(call, dy, np.where(mask, np.zeros((), w.dtype), w))
    channels = np.unique(np.nonzero(mask)[1])
    dy64 = dy.astype(np.float64)
    step = _chunk_channels(p)
    for first in range(0, len(channels), step):
        chunk = channels[first : first + step]
        exact = _real_tap_sums(p, dy64, w[:, chunk].astype(np.float64))
        landed = ~np.isfinite(exact)
        part = out[:, chunk]
        part[landed] = exact[landed].astype(out.dtype)
        out[:, chunk] = part
        del exact, landed, part  # before the next chunk's: one chunk at a time
    return out


def _real_tap_sums(p, dy64, w64):
    """dx of the channels of ``w64`` from the definition, summed over real taps only."""
    exact = np.zeros((p.n, w64.shape[1], p.hin, p.win), np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # Inf * 0 is NaN here by definition
        for i in range(p.kh):
            rows = _reach(p.hout, p.hin, p.sh, p.pt, i * p.dh)
            for j in range(p.kw):
                cols = _reach(p.wout, p.win, p.sw, p.pl, j * p.dw)
                if rows is None or cols is None:
                    continue  # this tap meets no real dy element
                (ho, h), (wo, x) = rows, cols
                exact[:, :, h, x] += np.einsum("nohw,oc->nchw", dy64[:, :, ho, wo], w64[:, :, i, j])
    return exact


def _reach(out_len, in_len, stride, pad, offset):
    """(dy slice, dx slice) of one tap along an axis: dy index o feeds dx index
    o*stride - pad + offset, kept where that lies in [0, in_len); None when nowhere."""
    first = max(0, -((offset - pad) // stride))  # least o with o*stride - pad + offset >= 0
    last = min(out_len - 1, (in_len - 1 + pad - offset) // stride)
    if first > last:
        return None
    start = first * stride - pad + offset
    return slice(first, last + 1), slice(start, start + (last - first) * stride + 1, stride)
