"""The judgement's element-wise work in one compiled pass a result: every element's error
against the float64 golden and the sums, counts and maxima the metrics are made of
(``accuracy``), and msprobe's columns (``msprobe_metrics``).

In NumPy the same work took some forty passes over arrays of every dx element (about 90 of a
judged ResNet-18 call's 130 ms); here each element is read once. The definitions are those of
``accuracy`` and ``grid`` (the once-rounded golden, the spacing, the distance in representable
values, the non-finite rules), which the tests check this pass against, element by element
and metric by metric. Sums run in blocks of ``BLOCK`` elements, each block's sum added to the
total: the same bits on every CPU (plain C at the baseline flags, no contraction), and an error
of about (BLOCK + n / BLOCK) eps of the sum rather than n eps.
"""

from libc.math cimport fabs, rint, isnan, INFINITY
from libc.stdint cimport uint16_t, uint64_t, int64_t

cdef extern from *:
    """
    #include <string.h>
    static inline uint64_t pypto_f64_bits(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }
    static inline double pypto_f64_of(uint64_t u) { double x; memcpy(&x, &u, 8); return x; }
    """
    uint64_t pypto_f64_bits(double x) nogil
    double pypto_f64_of(uint64_t u) nogil

cdef enum:
    _BLOCK = 512  # elements summed apart before their sum joins the total

BLOCK = _BLOCK

cdef double _EPS = 1e-7  # accuracy.EPS: the relative error's guard against a zero golden
cdef double _F64_EPS = 2.220446049250313e-16  # msprobe: float64's eps added where bench is 0


cdef inline double _pow2(int e) noexcept nogil:
    """2^e for e in float64's normal range."""
    return pypto_f64_of(<uint64_t>(e + 1023) << 52)


cdef inline int _ordinal(int bits) noexcept nogil:
    """The 16-bit pattern's position on the number line (-0 and +0 both 0)."""
    return -(bits & 0x7FFF) if bits & 0x8000 else bits


cdef struct Grid:
    int mantissa, emin, emax
    int exponent_mask  # the pattern's exponent field, in place


cdef inline int _round_bits(double g, const Grid* grid, bint* overflow) noexcept nogil:
    """The pattern of the finite ``g`` rounded once to the grid (ties to even), ``overflow``
    set when that is past the largest finite value (an Inf of g's sign)."""
    cdef uint64_t u = pypto_f64_bits(g)
    cdef int sign = <int>(u >> 63) << 15
    cdef int e = <int>((u >> 52) & 0x7FF) - 1023  # floor(log2 |g|); -1023 at 0 and below
    cdef int drop = 52 - grid.mantissa
    cdef uint64_t r
    cdef double q, count
    overflow[0] = False
    if grid.emin <= e <= grid.emax:
        # the dtype's normal range: round half to even on the bits at its last mantissa bit
        # (a carry into the exponent is the next binade, as it must be)
        r = u + ((<uint64_t>1 << (drop - 1)) - 1) + ((u >> drop) & 1)
        e = <int>((r >> 52) & 0x7FF) - 1023
        if e > grid.emax:
            overflow[0] = True
            return sign | grid.exponent_mask
        return sign | ((e - grid.emin + 1) << grid.mantissa) | <int>(
            (r >> drop) & ((<uint64_t>1 << grid.mantissa) - 1))
    if e > grid.emax:
        overflow[0] = True
        return sign | grid.exponent_mask
    # below the smallest normal: count spacings of the subnormal grid, to even; a count of
    # 2^m is the smallest normal, whose pattern is that count too
    q = _pow2(grid.emin - grid.mantissa)
    count = rint(fabs(g) / q)  # exact division by a power of two
    return sign | <int>count


def judge_pass(
    const double[::1] golden,
    const uint16_t[::1] bits,
    const double[::1] decoded,
    int mantissa,
    int emin,
    int emax,
    double tol,
    double small_limit,
    double small_error,
    int64_t[::1] per_distance,
    Py_ssize_t row,
    double[::1] row_max_abs,
    double[::1] row_max_ulp,
    int64_t[::1] above_at,
    double[::1] above_abs,
    double[::1] above_ulp,
    double[::1] abs_out=None,
    double[::1] ulp_out=None,
):
    """One result (``bits``, its fp16 / bf16 patterns; ``decoded``, each pattern's value)
    against ``golden`` (float64, finite or not), on the grid of ``mantissa``, ``emin`` and
    ``emax``. Every element's error is |a - g| (0 where non-finite values match, Inf on a
    mismatch), and that over the spacing at the golden its error in ulps: written to
    ``abs_out`` and ``ulp_out`` when given, their maxima over each run of ``row`` elements
    (a dx row) to ``row_max_abs`` and ``row_max_ulp``; the index, error and error in ulps of
    the first elements more than one ulp off (as many as ``above_at`` holds) to ``above_at``,
    ``above_abs`` and ``above_ulp`` (the sums' "above_1ulp" counts them all). Counts the distances in representable
    values of the compared elements (both sides finite) into ``per_distance`` (the last slot
    takes every larger one). Returns a dict of the sums: see ``accuracy.measure``."""
    cdef Py_ssize_t n = golden.shape[0], i, start, stop, r = 0, left = row
    cdef Py_ssize_t last = per_distance.shape[0] - 1, kept = above_at.shape[0]
    cdef bint write = abs_out is not None and ulp_out is not None
    cdef Grid grid
    grid.mantissa, grid.emin, grid.emax = mantissa, emin, emax
    grid.exponent_mask = (0x7FFF >> mantissa) << mantissa
    cdef double subnormal_ulp = _pow2(emin - mantissa)
    cdef double g, a, err, ulps, mag, per_spacing, rel, rounded, limit
    cdef uint64_t u
    cdef int p, gb, e, distance
    cdef bint overflow, golden_finite, same
    # totals, and each block's sums before they join them
    cdef double sum_rel = 0, sum_sq = 0, large_rel = 0, large_sq = 0
    cdef double b_rel, b_sq, b_large_rel, b_large_sq
    cdef double max_rel = 0, max_abs = 0, max_ulp = 0, large_max_rel = 0
    cdef double row_abs = 0, row_ulp = 0
    cdef int64_t compared = 0, mismatches = 0, large = 0, small_values = 0, small_errors = 0
    cdef int64_t below_1e3 = 0, below_1e2 = 0, within = 0, above_1ulp = 0, at_0 = 0, at_1 = 0
    if row < 1 or n % row or row_max_abs.shape[0] != n // row or row_max_ulp.shape[0] != n // row:
        raise ValueError("judge_pass: the rows do not divide the elements")
    if above_abs.shape[0] != kept or above_ulp.shape[0] != kept:
        raise ValueError("judge_pass: above_at, above_abs and above_ulp differ in size")
    if per_distance.shape[0] < 2:
        raise ValueError("judge_pass: per_distance needs a slot for distances 0 and 1")
    if bits.shape[0] != n or (write and (abs_out.shape[0] != n or ulp_out.shape[0] != n)):
        raise ValueError("judge_pass: arrays of different sizes")
    with nogil:
        start = 0
        while start < n:
            stop = start + _BLOCK if start + _BLOCK < n else n
            b_rel = 0
            b_sq = 0
            b_large_rel = 0
            b_large_sq = 0
            for i in range(start, stop):
                g = golden[i]
                p = bits[i]
                a = decoded[p]
                u = pypto_f64_bits(g)
                golden_finite = ((u >> 52) & 0x7FF) != 0x7FF
                if golden_finite:
                    gb = _round_bits(g, &grid, &overflow)
                    mag = fabs(g)
                    e = <int>((u >> 52) & 0x7FF) - 1023
                    if e < emin:
                        e = emin
                    elif e > emax:
                        e = emax
                    per_spacing = _pow2(mantissa - e)  # 1 / the spacing at g, exact
                else:
                    overflow = True
                    mag = 0.0
                    per_spacing = 1.0 / subnormal_ulp
                if not overflow and (p & grid.exponent_mask) != grid.exponent_mask:
                    # both finite: compared
                    err = fabs(a - g)
                    ulps = err * per_spacing
                    rel = err / (mag + _EPS)
                    compared += 1
                    b_rel += rel
                    b_sq += err * err
                    if rel > max_rel:
                        max_rel = rel
                    if err > max_abs:
                        max_abs = err
                    if ulps > max_ulp:
                        max_ulp = ulps
                    distance = _ordinal(p) - _ordinal(gb)
                    if distance < 0:
                        distance = -distance
                    # the common distances in registers: a count in memory incremented
                    # element after element waits on its own store
                    if distance == 0:
                        at_0 += 1
                    elif distance == 1:
                        at_1 += 1
                    else:
                        per_distance[distance if distance < last else last] += 1
                    if mag < small_limit:
                        small_values += 1
                        if err > small_error:
                            small_errors += 1
                    else:
                        large += 1
                        b_large_rel += rel
                        b_large_sq += err * err
                        if rel > large_max_rel:
                            large_max_rel = rel
                else:
                    # a non-finite side: equal when both are NaN or the same Inf
                    # (the golden rounded: NaN / Inf as they are, an Inf past the range)
                    rounded = g
                    if golden_finite and overflow:
                        rounded = -INFINITY if g < 0 else INFINITY
                    same = (isnan(a) and isnan(rounded)) or a == rounded
                    err = 0.0 if same else INFINITY
                    ulps = err * per_spacing
                    mismatches += not same
                    rel = err / (mag + _EPS)
                if write:
                    abs_out[i] = err
                    ulp_out[i] = ulps
                if ulps > 1.0:
                    if above_1ulp < kept:
                        above_at[above_1ulp] = i
                        above_abs[above_1ulp] = err
                        above_ulp[above_1ulp] = ulps
                    above_1ulp += 1
                below_1e3 += rel < 1e-3
                below_1e2 += rel < 1e-2
                limit = tol + tol * mag
                within += err <= limit
                if err > row_abs:
                    row_abs = err
                if ulps > row_ulp:
                    row_ulp = ulps
                left -= 1
                if left == 0:
                    row_max_abs[r] = row_abs
                    row_max_ulp[r] = row_ulp
                    r += 1
                    left = row
                    row_abs = 0
                    row_ulp = 0
            sum_rel += b_rel
            sum_sq += b_sq
            large_rel += b_large_rel
            large_sq += b_large_sq
            start = stop
    per_distance[0] += at_0
    if last >= 1:
        per_distance[1] += at_1
    return {
        "compared": compared,
        "mismatches": mismatches,
        "sum_rel": sum_rel,
        "sum_sq": sum_sq,
        "max_rel": max_rel,
        "max_abs": max_abs,
        "max_ulp": max_ulp,
        "large": large,
        "large_sum_rel": large_rel,
        "large_sum_sq": large_sq,
        "large_max_rel": large_max_rel,
        "small_values": small_values,
        "small_errors": small_errors,
        "below_1e3": below_1e3,
        "below_1e2": below_1e2,
        "within": within,
        "above_1ulp": above_1ulp,
    }


def msprobe_pass(const uint16_t[::1] bits, const double[::1] decoded, const double[::1] bench):
    """msprobe's sums of a result (``bits``, fp16 / bf16 patterns, ``decoded`` their values)
    against ``bench`` (float64), in float64 as msprobe computes them for these dtypes: None
    when NaN or Inf stand at different places on the two sides (msprobe's "N/A"), else a dict
    of dot(n, b), |n|^2, |b|^2, |n - b|^2, max |n - b|, the largest relative error and the
    counts of relative errors below 0.001 and 0.005, NaN and Inf (at the same places) read as
    0 on both sides."""
    cdef Py_ssize_t n = bench.shape[0], i, start, stop
    cdef double x, b, d, rel, dot = 0, nn = 0, bb = 0, dd = 0, max_abs = 0, max_rel = 0
    cdef double b_dot, b_nn, b_bb, b_dd
    cdef int64_t below_1e3 = 0, below_5e3 = 0
    cdef bint x_nan, x_inf, b_nan, b_inf, nan_rel = False, apart = False
    if bits.shape[0] != n:
        raise ValueError("msprobe_pass: arrays of different sizes")
    with nogil:
        start = 0
        while start < n and not apart:
            stop = start + _BLOCK if start + _BLOCK < n else n
            b_dot = 0
            b_nn = 0
            b_bb = 0
            b_dd = 0
            for i in range(start, stop):
                x = decoded[bits[i]]
                b = bench[i]
                x_nan = isnan(x)
                b_nan = isnan(b)
                x_inf = not x_nan and fabs(x) == INFINITY
                b_inf = not b_nan and fabs(b) == INFINITY
                if x_nan != b_nan or x_inf != b_inf:
                    apart = True
                    break
                if x_nan or x_inf:
                    x = 0.0
                    b = 0.0
                d = x - b
                if b == 0:
                    rel = fabs(((x + _F64_EPS) - _F64_EPS) / _F64_EPS)
                else:
                    rel = fabs(d / b)
                b_dot += x * b
                b_nn += x * x
                b_bb += b * b
                b_dd += d * d
                if fabs(d) > max_abs:
                    max_abs = fabs(d)
                if isnan(rel):
                    nan_rel = True
                elif rel > max_rel:
                    max_rel = rel
                below_1e3 += rel < 1e-3
                below_5e3 += rel < 5e-3
            dot += b_dot
            nn += b_nn
            bb += b_bb
            dd += b_dd
            start = stop
    if apart:
        return None
    return {
        "dot": dot,
        "nn": nn,
        "bb": bb,
        "dd": dd,
        "max_abs": max_abs,
        "max_rel": float("nan") if nan_rel else max_rel,
        "below_1e3": below_1e3,
        "below_5e3": below_5e3,
    }
