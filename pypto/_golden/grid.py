"""The fp16 / bf16 grids: the spacing at a value (ulp), the once-rounded value, the distance in
representable values, and what every judgement of one golden shares (:class:`GoldenGrid`).

These are the definitions, in NumPy. The judgement's own pass over every element
(``elementwise``, compiled) computes the same per element and is tested against them; the arrays
here serve the error bound, the localisation and whoever asks, each made once a golden.
"""

from functools import cached_property

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
    "GRID_LIMITS",
    "pattern_values",
]

# (explicit mantissa bits, exponent of the smallest normal, exponent of the largest finite)
_GRID = {DataType.DT_FP16: (10, -14, 15), DataType.DT_BF16: (7, -126, 127)}
_BF16 = numpy_dtype(DataType.DT_BF16)
MANTISSA_BITS = {dtype: grid[0] for dtype, grid in _GRID.items()}
GRID_LIMITS = dict(_GRID)  # dtype -> (mantissa bits, emin, emax)
# --- the fp16 / bf16 grids ---------------------------------------------------------------------
# The spacing and the once-rounded value come from the float64 bits (a few integer passes).
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


class GoldenGrid:
    """What judgements of one golden may need, each made when first asked for and then kept:
    where it is finite, its value (0 where not), its magnitude, the grid's spacing there, and
    the golden rounded once to the output dtype (NaN and Inf kept) with the ordinals of its
    16-bit patterns. The judgement's own pass (``elementwise``) reads the golden itself; these
    arrays serve the error bound, the localisation's lazy views and the tests."""

    def __init__(self, golden, dtype):
        self.golden, self.dtype = golden, dtype

    @cached_property
    def finite(self):
        return np.isfinite(self.golden)

    @cached_property
    def value(self):
        return self.golden if self.finite.all() else np.where(self.finite, self.golden, 0.0)

    @cached_property
    def magnitude(self):
        return np.abs(self.value)

    @cached_property
    def ulp(self):
        return ulp_at(self.value, self.dtype)

    def ulp_of(self, flat):
        """The spacing at the flat indices ``flat``: read from ``ulp`` when that is made, else
        computed at those elements alone (the bound's few)."""
        if "ulp" in vars(self):  # cached_property keeps a made array in the instance
            return self.ulp.reshape(-1)[flat]
        golden = self.golden.reshape(-1)[flat]
        return ulp_at(np.where(np.isfinite(golden), golden, 0.0), self.dtype)

    @cached_property
    def rounded(self):
        return grid_round(self.golden, self.dtype)

    @cached_property
    def ordinal(self):
        return ordinal(_grid_bits(self.rounded, self.dtype))

    @cached_property
    def rounded_finite(self):
        return np.isfinite(self.rounded)


def golden_grid(golden, dtype):
    """:class:`GoldenGrid` of ``golden`` (float64) for the output ``dtype``."""
    return GoldenGrid(golden, dtype)


_PATTERN_VALUES = {}


def pattern_values(dtype):
    """Every 16-bit pattern's value in ``dtype`` (fp16 / bf16) as float64, indexed by the
    pattern (65,536 values, made once)."""
    if dtype not in _PATTERN_VALUES:
        patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
        with np.errstate(invalid="ignore"):  # the signalling NaN patterns
            values = to_float64(patterns.view(numpy_dtype(dtype)))
        values.flags.writeable = False
        _PATTERN_VALUES[dtype] = values
    return _PATTERN_VALUES[dtype]
