"""The fp16 / bf16 grids: the spacing at a value (ulp), the once-rounded value, the distance in
representable values, and what every judgement of one golden shares (:class:`GoldenGrid`).

Judging spends most of its time here, on arrays of every dx element: the spacing and the
rounding come from the float64 bits (a few integer passes), and a golden's grid is computed once
for all the results judged against it.
"""

from dataclasses import dataclass, field

import numpy as np

from .._dtypes import DataType, numpy_dtype

__all__ = [
    "grid_round",
    "ulp_at",
    "ulp_distance",
    "ordinal",
    "to_float32",
    "to_float64",
    "GoldenGrid",
    "golden_grid",
    "MANTISSA_BITS",
]

# (explicit mantissa bits, exponent of the smallest normal, exponent of the largest finite)
_GRID = {DataType.DT_FP16: (10, -14, 15), DataType.DT_BF16: (7, -126, 127)}
_BF16 = numpy_dtype(DataType.DT_BF16)
MANTISSA_BITS = {dtype: grid[0] for dtype, grid in _GRID.items()}
# --- the fp16 / bf16 grids ---------------------------------------------------------------------
# Judging spends most of its time here, on arrays of every dx element: the grid's spacing and
# the once-rounded golden come from the float64 bits (a few integer passes), and what several
# judgements of one golden share is computed once (GoldenGrid).
_SIGN = np.uint64(1 << 63)
_EXPONENT_SHIFT = np.uint64(52)


def _binade(a, dtype):
    """floor(log2 |a|) for finite a, never below the smallest normal's exponent (zero too)."""
    _, emin, emax = _GRID[dtype]
    with np.errstate(divide="ignore", invalid="ignore"):
        _, e = np.frexp(a)
    return np.clip(np.where(a == 0, emin, e.astype(np.int64) - 1), emin, emax)


def ulp_at(values, dtype):
    """Spacing of the output dtype's grid at each float64 value (inf where not finite):
    2^(floor(log2 |v|) - mantissa bits), the exponent clipped to the dtype's range, so zero and
    values below the smallest normal get the subnormal spacing."""
    mantissa, emin, emax = _GRID[dtype]
    v = np.ascontiguousarray(values, dtype=np.float64)
    e = ((v.view(np.uint64) >> _EXPONENT_SHIFT) & np.uint64(0x7FF)).astype(np.int64)
    nonfinite = e == 0x7FF
    np.clip(e, emin + 1023, emax + 1023, out=e)
    e -= mantissa
    out = (e.astype(np.uint64) << _EXPONENT_SHIFT).view(np.float64)
    out[nonfinite] = np.inf
    return out


def _grid_round_slowly(x, dtype):
    """grid_round for any float64 (subnormal or beyond the range in the output dtype included):
    x / ulp is exact, ``np.rint`` rounds half to even and the product is exact."""
    mantissa, _, emax = _GRID[dtype]
    finite = np.isfinite(x)
    xf = np.where(finite, x, 0.0)
    q = np.ldexp(1.0, _binade(xf, dtype) - mantissa)
    r = np.rint(xf / q) * q
    largest = (2.0 - 2.0**-mantissa) * 2.0**emax
    r = np.where(np.abs(r) > largest, np.copysign(np.inf, xf), r)
    r = np.where(r == 0, np.copysign(0.0, xf), r)
    return np.where(finite, r, x)


def grid_round(values, dtype):
    """float64 -> the nearest fp16/bf16 value (ties to even, one rounding), as float64.

    Within the dtype's normal range the float64 bits are rounded at the dtype's last mantissa
    bit (round half to even on the integer pattern; a carry into the exponent is the next
    binade, as it must be). Values below the smallest normal, at or past the overflow threshold
    (max + ulp/2: Inf), NaN and Inf take the exact general path.
    """
    mantissa, emin, emax = _GRID[dtype]
    x = np.ascontiguousarray(values, dtype=np.float64)
    drop = 52 - mantissa
    bits = x.view(np.uint64)
    r = bits + np.uint64((1 << (drop - 1)) - 1)
    r += (bits >> np.uint64(drop)) & np.uint64(1)
    r &= np.uint64(((1 << 64) - 1) ^ ((1 << drop) - 1))
    out = r.view(np.float64)
    magnitude = bits & ~_SIGN
    largest = np.float64((2.0 - 2.0**-mantissa) * 2.0**emax).view(np.uint64)
    odd = (magnitude < np.uint64((emin + 1023) << 52)) | (magnitude > largest)
    if odd.any():
        flat = np.flatnonzero(odd)
        out.reshape(-1)[flat] = _grid_round_slowly(x.reshape(-1)[flat], dtype)
    return out


def to_float32(array):
    """A new float32 array of ``array``'s fp16 / bf16 (or float32) values, exact: bf16 through
    its bits (faster than a cast). Always a copy: callers write into it."""
    if array.dtype == _BF16:
        wide = np.ascontiguousarray(array).view(np.uint16).astype(np.uint32)
        wide <<= np.uint32(16)
        return wide.view(np.float32)
    return array.astype(np.float32)


def to_float64(array):
    """A new float64 array of ``array``'s values: bf16 through its bits (exact, and faster than
    a cast), other dtypes by NumPy's cast. Always a copy: callers write into it."""
    if array.dtype == _BF16:
        return to_float32(array).astype(np.float64)
    return array.astype(np.float64)


# the position of each 16-bit pattern on the number line (-0 and +0 both 0), by lookup
_ORDINALS = np.arange(1 << 16, dtype=np.int32)
_ORDINALS = np.where(_ORDINALS & 0x8000, -(_ORDINALS & 0x7FFF), _ORDINALS).astype(np.int32)


def ordinal(bits):
    """Position of each 16-bit float pattern on the number line (-0 and +0 both 0), int32."""
    return _ORDINALS[bits]


def _grid_bits(rounded, dtype):
    """The 16-bit patterns of values on the dtype's grid (exact: they are representable)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == DataType.DT_FP16:
            return rounded.astype(np.float16).view(np.uint16)
        return (rounded.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)


def ulp_distance(actual, golden64, dtype):
    """How many representable values lie between ``actual`` and the golden rounded once."""
    rounded = ordinal(_grid_bits(grid_round(golden64, dtype), dtype))
    return np.abs(ordinal(np.ascontiguousarray(actual).view(np.uint16)) - rounded)


@dataclass
class GoldenGrid:
    """What every judgement of one golden needs, computed once: where it is finite, its value
    (0 where not), its magnitude, the grid's spacing there, and the golden rounded once to the
    output dtype (NaN and Inf kept) with the ordinals of its 16-bit patterns."""

    finite: np.ndarray
    value: np.ndarray
    magnitude: np.ndarray
    ulp: np.ndarray
    rounded: np.ndarray
    ordinal: np.ndarray
    rounded_finite: np.ndarray
    shared: dict = field(default_factory=dict)  # what the metrics derive from it, made once


def golden_grid(golden, dtype):
    """:class:`GoldenGrid` of ``golden`` (float64) for the output ``dtype``."""
    finite = np.isfinite(golden)
    value = golden if finite.all() else np.where(finite, golden, 0.0)
    rounded = grid_round(golden, dtype)
    return GoldenGrid(
        finite,
        value,
        np.abs(value),
        ulp_at(value, dtype),
        rounded,
        ordinal(_grid_bits(rounded, dtype)),
        np.isfinite(rounded),
    )
