"""A golden case: the problem and its tiles, random inputs, the float64 golden, pypto's result.

The golden is dx computed in float64 from the fp16/bf16 inputs by ``pypto._golden.reference``'s
GEMM + col2im (NumPy, no code shared with the Cython kernels): every product of two fp16/bf16
values is exact in float64 and the sums carry at most K * 2^-53 * sum|dy*w| of error,
K = Cout*Kh*Kw, some 2^-29 of what fp32 accumulation may lose. Only real taps contribute, so
Inf/NaN inputs give the definition's Inf/NaN. The second benchmark is pypto's own CPU result, always
from the CPU kernel (fp32 accumulation, one rounding), whatever backend ``set_device`` selects.

Everything is validated by the op's own rules (T1 ... V1) and memory-guarded like the op
before any array is drawn or allocated.
"""

import math
from dataclasses import dataclass

import numpy as np

from .._core.memory import check_host_memory
from .._core.rules import problem_from_shapes, rule_message, tile_violation
from .._core.tiling import ConvProblem, Tiling
from .._core.values import as_int
from .._dtypes import DataType, dtype_name, numpy_dtype, parse_dtype_name
from ..error import ConvBpValueError, FeError
from ..pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info
from .reference import dgrad_gemm_col2im, gemm_col2im_bytes

__all__ = [
    "Case",
    "make_case",
    "golden_dgrad",
    "error_bound",
    "pypto_dgrad",
    "draw_inputs",
    "check_golden",
    "DISTRIBUTIONS",
]

DISTRIBUTIONS = ("uniform", "normal", "ints", "truncated_normal")
DEFAULT_VEC = (16, 16, 16, 16)
U32 = 2.0**-24  # fp32 unit roundoff
U64 = 2.0**-53  # float64 unit roundoff
# check_golden: random elements, non-finite ones (at most), largest ones
SAMPLE_RANDOM, SAMPLE_NONFINITE, SAMPLE_LARGEST = 1024, 1024, 16


@dataclass(frozen=True)
class Case:
    """A dgrad problem the op accepts, with legal tiles (upstream order M, K, N)."""

    grad_output_shape: tuple
    weight_shape: tuple
    input_size: tuple
    strides: tuple
    paddings: tuple
    dilations: tuple
    dtype: DataType
    l1: tuple
    l0: tuple
    vec: tuple
    problem: ConvProblem
    tiling: Tiling

    @property
    def np_dtype(self):
        return numpy_dtype(self.dtype)

    @property
    def dtype_name(self):
        return dtype_name(self.dtype)

    @property
    def k_terms(self):
        """K = Cout * Kh * Kw: the length of every dx element's sum."""
        return self.problem.gemm_k

    def as_dict(self):
        """The problem and tiles as plain data: the manifest's and the JSON report's "case"."""
        return {
            "dtype": self.dtype_name,
            "grad_output": list(self.grad_output_shape),
            "weight": list(self.weight_shape),
            "input_size": list(self.input_size),
            "strides": list(self.strides),
            "paddings": list(self.paddings),
            "dilations": list(self.dilations),
            "tiles": {
                "order": "M, K, N (upstream ConvBpTileL1Info / ConvBpTileL0Info)",
                "l1": list(self.l1),
                "l0": list(self.l0),
                "vec": list(self.vec),
            },
        }

    def describe(self):
        return (
            f"grad_output {list(self.grad_output_shape)} weight {list(self.weight_shape)} "
            f"-> input_size {list(self.input_size)}, strides {list(self.strides)}, paddings "
            f"{list(self.paddings)}, dilations {list(self.dilations)}, {self.dtype_name}"
        )

    def describe_tiles(self):
        return (
            f"tiles L1 (M, K, N) = {tuple(self.l1)}, L0 = {tuple(self.l0)}, vec = {list(self.vec)}"
        )


def _tile_triple(value, name, info_type):
    if isinstance(value, info_type):
        return tuple(value.as_tuple())
    try:  # ints and NumPy integers only: 16.5 is no tile (the op's TS0 says the same)
        triple = tuple(as_int(v) for v in value)
    except TypeError:
        triple = None
    if triple is None or len(triple) != 3 or None in triple:
        raise FeError(
            TypeError(
                f"{name} must be a {info_type.__name__} or 3 ints (M, K, N), but got {value!r}"
            )
        )
    return triple


def make_case(
    grad_output_shape,
    weight_shape,
    input_size,
    dtype,
    strides,
    paddings,
    dilations,
    tiles=None,
    vec=None,
):
    """Validate a problem by the op's rules and fill in its tiles: a :class:`Case`.

    ``input_size`` None: the smallest valid size. ``tiles``: ``(l1, l0)`` or ``(l1, l0, vec)``,
    l1 and l0 as ConvBpTileL1Info / ConvBpTileL0Info or 3-int sequences (M, K, N); None: the
    suggested tiles. ``vec``: the vector tile shapes, default 16,16,16,16.
    """
    from .._convbp import conv_backward_input_size_range
    from .._core.suggest import suggest_convbp_input_tile_shapes

    dtype = parse_dtype_name(dtype)
    if dtype is None:
        raise FeError(ValueError("dtype must be given: 'fp16' or 'bf16'"))
    if input_size is None:
        (hin, _), (win, _) = conv_backward_input_size_range(
            grad_output_shape, weight_shape, strides, paddings, dilations
        )
        input_size = [grad_output_shape[0], weight_shape[1], hin, win]
    problem = problem_from_shapes(
        grad_output_shape, weight_shape, input_size, dtype, strides, paddings, dilations
    )
    if tiles is None:
        l1, l0 = suggest_convbp_input_tile_shapes(
            grad_output_shape, weight_shape, input_size, dtype, strides, paddings, dilations
        )
        tiles = (l1, l0)
    if not isinstance(tiles, (list, tuple)) or len(tiles) not in (2, 3):
        raise FeError(TypeError(f"tiles must be (l1, l0) or (l1, l0, vec), but got {tiles!r}"))
    if len(tiles) == 3 and vec is None:
        vec = tiles[2]
    l1 = _tile_triple(tiles[0], "tiles[0] (L1)", ConvBpTileL1Info)
    l0 = _tile_triple(tiles[1], "tiles[1] (L0)", ConvBpTileL0Info)
    tiling = Tiling(*l1, *l0)
    violation = tile_violation(problem, tiling)
    if violation is not None:
        raise ConvBpValueError(*violation)
    try:
        values = tuple(DEFAULT_VEC if vec is None else (as_int(v) for v in vec))
    except TypeError:
        values = (None,)
    if None in values:
        raise FeError(TypeError(f"vec must be 4 or 5 ints, but got {vec!r}"))
    vec = values
    message = rule_message("V1", problem, tiling, list(vec))
    if message is not None:
        raise ConvBpValueError("V1", message)
    p = problem
    return Case(
        (p.n, p.cout, p.hout, p.wout),
        (p.cout, p.cin, p.kh, p.kw),
        (p.n, p.cin, p.hin, p.win),
        (p.sh, p.sw),
        (p.pt, p.pb, p.pl, p.pr),
        (p.dh, p.dw),
        dtype,
        l1,
        l0,
        vec,
        problem,
        tiling,
    )


# --- memory ------------------------------------------------------------------------------------
def _dgrad64_bytes(case):
    p = case.problem
    return gemm_col2im_bytes(
        case.grad_output_shape, case.weight_shape, (p.hin, p.win), case.strides, case.dilations
    )


def golden_bytes(case):
    """What one float64 golden (or error bound) allocates."""
    return _dgrad64_bytes(case)


def comparison_bytes(case):
    """What judging one result allocates besides the golden: float64 copies of the golden, the
    result, pypto's result and the bound, and a dozen per-element error arrays."""
    return 16 * 8 * math.prod(case.input_size)


def inputs_bytes(case):
    """Random inputs drawn in float64, then stored in fp16/bf16."""
    return 10 * (math.prod(case.grad_output_shape) + math.prod(case.weight_shape))


# --- the computations --------------------------------------------------------------------------
def _dgrad64(case, dy, w, what):
    from .grid import to_float64  # bf16 through its bits: exact, and faster than a cast

    check_host_memory(_dgrad64_bytes(case), case.problem, what)
    p = case.problem
    dy, w = to_float64(dy), to_float64(w)
    with np.errstate(invalid="ignore", over="ignore"):  # Inf * 0 at a real tap is NaN
        return dgrad_gemm_col2im(
            dy, w, (p.hin, p.win), case.strides, case.paddings, case.dilations, dtype=np.float64
        )


def golden_dgrad(case, dy, w):
    """dx in float64 from the fp16/bf16 inputs (exact products, float64 sums)."""
    return _dgrad64(case, dy, w, "the float64 golden (GEMM + col2im)")


def error_bound(case, dy, w, golden, rounding_ulps=1.0, grid=None):
    """Per element, what any fp32-accumulating kernel with one final rounding may be off by:
    ``rounding_ulps`` ulps of the output dtype at the golden plus (1 + 2^-p) K 2^-24 sum|dy w|
    (recursive fp32 summation in any order, Higham eq. 4.4; 2^-p = half the dtype's relative
    spacing, the final rounding's share of the accumulation error, which matters where the sum
    cancels to far below its terms). One ulp (the default) covers any rounding mode and the
    binade above; half an ulp is round-to-nearest's own bound. At a golden of 0 the ulp is the
    dtype's subnormal spacing. A result outside it is wrong, not merely imprecise. The one
    definition of the bound in pypto. ``grid``: the golden's GoldenGrid, when the caller has
    it. ``dy`` and ``w``: the fp16 / bf16 inputs, or their exact float32 copies
    (``grid.to_float32``)."""
    from .grid import golden_grid

    if grid is None:
        grid = golden_grid(golden, case.dtype)
    magnitude = _magnitude(case, dy, w)
    with np.errstate(invalid="ignore"):
        return magnitude * np.float64(accumulation_share(case)) + rounding_ulps * grid.ulp


def accumulation_share(case):
    """The bound's accumulation term per unit of sum|dy w|: K 2^-24 for the fp32 sums, times
    (1 + 2^-(p+1)) for the final rounding's share (error_bound; bound.ErrorBound.at)."""
    from .grid import MANTISSA_BITS

    return case.k_terms * U32 * (1.0 + 2.0 ** -(MANTISSA_BITS[case.dtype] + 1))


_F32_TINY = float(np.finfo(np.float32).tiny)  # 2^-126, float32's smallest normal


def _magnitude(case, dy, w):
    """sum |dy w| per dx element, never below the exact sum. In float32 (half the float64
    GEMM's time) where that is safe: every product of two fp16 / bf16 magnitudes is exact in
    float32, and any order of the K - 1 additions of non-negative terms is off by less than
    gamma = (K - 1) 2^-24 / (1 - (K - 1) 2^-24) of the sum, so the float32 sum divided by
    (1 - 2 K 2^-24) is above the exact one; 2 K 2^-126 more covers products and sums flushed
    to zero below float32's normal range. Float64 (its error 2^-29 of that, negligible) when
    K 2^-24 > 2^-10, when the largest product times K could come near float32's overflow, or
    when an input is below float32's normal range (a flush-to-zero of inputs would drop it)."""
    from .grid import to_float32

    a, b = to_float32(dy), to_float32(w)  # exact copies
    np.abs(a, out=a)
    np.abs(b, out=b)
    k = case.k_terms
    with np.errstate(over="ignore", invalid="ignore"):
        largest = float(a.max(initial=0.0)) * float(b.max(initial=0.0)) * k
        tiny = any(np.count_nonzero(v) != np.count_nonzero(v >= _F32_TINY) for v in (a, b))
    if k * U32 <= 2.0**-10 and largest < 2.0**120 and not tiny:  # NaN: float64
        p = case.problem
        check_host_memory(_dgrad64_bytes(case) // 2, p, "the error bound (GEMM + col2im)")
        with np.errstate(invalid="ignore", over="ignore"):
            m = dgrad_gemm_col2im(
                a, b, (p.hin, p.win), case.strides, case.paddings, case.dilations, np.float32
            )
        return m * np.float64(1.0 / (1.0 - 2.0 * k * U32)) + 2.0 * k * _F32_TINY
    return _dgrad64(case, a, b, "the float64 error bound (GEMM + col2im of |dy|, |w|)")


def pypto_dgrad(case, dy, w):
    """pypto's own result with the case's tiles, on the CPU kernel (the second benchmark)."""
    from .._core import options as _config
    from .._core.rules import validate_conv_backward_input
    from .._kernels.dispatch import conv_backward_input_cpu
    from ..tensor import from_numpy

    with _config.options(
        convbp_tile_shapes=(ConvBpTileL1Info(*case.l1), ConvBpTileL0Info(*case.l0)),
        vec_tile_shapes=list(case.vec),
    ):
        call = validate_conv_backward_input(
            from_numpy(dy),
            list(case.input_size),
            from_numpy(w),
            case.dtype,
            list(case.strides),
            list(case.paddings),
            list(case.dilations),
        )
        return conv_backward_input_cpu(call, dy, w)


def _draw(rng, shape, dist, value_range):
    """One array in float64 from ``dist`` and ``value_range`` (see :func:`draw_inputs`)."""
    if value_range is None:
        if dist == "uniform":
            return rng.uniform(-1.0, 1.0, shape)
        if dist == "normal":
            return rng.standard_normal(shape)
        if dist == "ints":
            return rng.integers(-4, 5, shape).astype(np.float64)
        value_range = (-2.0, 2.0)  # truncated_normal: the standard normal cut at 2 sigma
    lo, hi = (float(v) for v in value_range)
    if dist == "uniform":
        return rng.uniform(lo, hi, shape)
    if dist == "normal":  # msOpST's meaning of a range: [mean, standard deviation]
        return rng.normal(lo, abs(hi) + 1e-4, shape)
    if dist == "ints":
        return rng.integers(math.ceil(lo), math.floor(hi) + 1, shape).astype(np.float64)
    # truncated_normal: mean at the middle, 2 sigma to either end, redrawn outside [lo, hi]
    mean, sigma = (lo + hi) / 2, (hi - lo) / 4
    values = rng.normal(mean, sigma, shape) if sigma > 0 else np.full(shape, mean)
    outside = (values < lo) | (values > hi)
    while outside.any():
        values[outside] = rng.normal(mean, sigma, int(outside.sum()))
        outside = (values < lo) | (values > hi)
    return values


def draw_inputs(case, dist, seed, value_ranges=None):
    """(dy, w) of the case's dtype. ``dist``: a name of DISTRIBUTIONS, or a pair (dy's, w's).
    Without a range: uniform in [-1, 1), standard normal, ints in [-4, 4], truncated_normal
    (the standard normal cut at +-2). ``value_ranges``: None, or a pair of (lo, hi) or None
    (dy's, w's): uniform in [lo, hi), normal with mean lo and standard deviation |hi| + 1e-4
    (msOpST's meaning), ints in [lo, hi], truncated_normal with mean (lo + hi) / 2 and sigma
    (hi - lo) / 4, redrawn outside [lo, hi]."""
    dists = (dist, dist) if isinstance(dist, str) else tuple(dist)
    ranges = (None, None) if value_ranges is None else tuple(value_ranges)
    for name in dists:
        if name not in DISTRIBUTIONS:
            raise FeError(
                ValueError(f"dist must be one of {', '.join(DISTRIBUTIONS)}, but got {name!r}")
            )
    for name, value_range in zip(dists, ranges):
        if value_range is not None and (
            len(value_range) != 2
            or not all(math.isfinite(float(v)) for v in value_range)
            # a normal's range is [mean, standard deviation]: no order
            or (name != "normal" and float(value_range[0]) > float(value_range[1]))
        ):
            raise FeError(
                ValueError(f"a value range must be [lo, hi], lo <= hi, but got {value_range!r}")
            )
    check_host_memory(inputs_bytes(case), case.problem, "the random inputs")
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, name, value_range in zip((case.grad_output_shape, case.weight_shape), dists, ranges):
        arrays.append(_draw(rng, shape, name, value_range).astype(case.np_dtype))
    return tuple(arrays)


def _sample_positions(case, dy, w, golden, seed):
    """Flat indices for check_golden: random ones, the non-finite ones (a random subset when
    there are many), those of the largest finite |golden|, and some that a non-finite input
    feeds (where the golden must be non-finite too)."""
    rng = np.random.default_rng(seed)
    flat = golden.reshape(-1)
    picked = [rng.integers(0, flat.size, min(SAMPLE_RANDOM, flat.size))]
    finite = np.isfinite(flat)
    nonfinite = np.flatnonzero(~finite)
    if nonfinite.size > SAMPLE_NONFINITE:
        nonfinite = rng.choice(nonfinite, SAMPLE_NONFINITE, replace=False)
    picked.append(nonfinite)
    magnitude = np.abs(flat)
    magnitude[~finite] = -1.0
    k = min(SAMPLE_LARGEST, flat.size)
    picked.append(np.argpartition(magnitude, flat.size - k)[flat.size - k :])
    picked.append(_fed_by_nonfinite(case, dy, w, rng))
    return np.unique(np.concatenate(picked).astype(np.int64))


def _fed_by_nonfinite(case, dy, w, rng):
    """Flat dx indices that some Inf/NaN of dy or w reaches through a real tap (at most
    SAMPLE_NONFINITE of those inputs, one dx element each): dx is non-finite there."""
    p = case.problem
    found = []
    bad = np.argwhere(~np.isfinite(dy))
    if len(bad):
        bad = bad[rng.choice(len(bad), min(len(bad), SAMPLE_NONFINITE), replace=False)]
        for n, _o, ho, wo in bad:
            for i in range(p.kh):
                h = ho * p.sh - p.pt + i * p.dh
                x = wo * p.sw - p.pl + np.arange(p.kw) * p.dw
                x = x[(x >= 0) & (x < p.win)]
                if 0 <= h < p.hin and x.size:
                    found.append(((n * p.cin + rng.integers(p.cin)) * p.hin + h) * p.win + x[0])
                    break
    bad = np.argwhere(~np.isfinite(w))
    if len(bad):
        bad = bad[rng.choice(len(bad), min(len(bad), SAMPLE_NONFINITE), replace=False)]
        for _o, c, i, j in bad:
            h = np.arange(p.hout) * p.sh - p.pt + i * p.dh
            x = np.arange(p.wout) * p.sw - p.pl + j * p.dw
            h, x = h[(h >= 0) & (h < p.hin)], x[(x >= 0) & (x < p.win)]
            if h.size and x.size:  # else this tap only ever meets the padding
                found.append(((rng.integers(p.n) * p.cin + c) * p.hin + h[0]) * p.win + x[0])
    return np.array(found, dtype=np.int64)


def _dx_at(case, dy, w, positions):
    """(dx, sum|dy*w|) in float64 at ``positions`` ([m, 4] of (n, c, h, x)), summed straight
    from the definition: dy (n, o, ho, wo) with w (o, c, i, j) feeds dx (n, c, ho*sh - pt +
    i*dh, wo*sw - pl + j*dw). Shares nothing with the GEMM + col2im the golden comes from."""
    p = case.problem
    n, c, h, x = (positions[:, k] for k in range(4))
    dx = np.zeros(len(positions))
    size = np.zeros(len(positions))
    # chunks of positions: a [chunk, Cout] product per tap stays small
    chunk = max(1, (1 << 20) // p.cout)
    with np.errstate(invalid="ignore", over="ignore"):  # Inf * 0 at a real tap is NaN
        for i in range(p.kh):
            top = h + p.pt - i * p.dh  # = ho * sh when tap i reaches h
            for j in range(p.kw):
                left = x + p.pl - j * p.dw
                real = (
                    (top % p.sh == 0)
                    & (top >= 0)
                    & (top < p.hout * p.sh)
                    & (left % p.sw == 0)
                    & (left >= 0)
                    & (left < p.wout * p.sw)
                )
                for lo in range(0, len(positions), chunk):
                    part = np.flatnonzero(real[lo : lo + chunk]) + lo
                    if part.size == 0:
                        continue
                    rows = dy[n[part], :, top[part] // p.sh, left[part] // p.sw]  # [m, Cout]
                    cols = w[:, c[part], i, j].T  # [m, Cout]
                    products = rows.astype(np.float64) * cols.astype(np.float64)
                    dx[part] += products.sum(axis=1)
                    size[part] += np.abs(products).sum(axis=1)
    return dx, size


def check_golden(case, dy, w, golden, name="the golden", seed=0):
    """Raise a PyptoError when ``golden`` does not match the inputs it claims to come from, at
    a sample of elements recomputed in float64 (see :func:`_sample_positions`): a corrupted
    or edited golden would otherwise decide every verdict (a NaN golden passes a NaN result).
    Both sums lose at most K * 2^-53 * sum|dy*w| (exact products); non-finite values must be
    the same (NaN where NaN, Inf of the same sign)."""
    check_host_memory(
        10 * golden.size + (1 << 24), case.problem, "the check of the golden against the inputs"
    )
    flat = _sample_positions(case, dy, w, golden, seed)
    positions = np.stack(np.unravel_index(flat, golden.shape), axis=1)
    recomputed, size = _dx_at(case, dy, w, positions)
    given = golden.reshape(-1)[flat].astype(np.float64)
    tolerance = 2 * case.k_terms * U64 * size + 1e-300
    with np.errstate(invalid="ignore", over="ignore"):
        finite = np.isfinite(given) & np.isfinite(recomputed)
        same = np.where(
            finite,
            np.abs(given - recomputed) <= tolerance,
            (np.isnan(given) & np.isnan(recomputed)) | (given == recomputed),
        )
    if not same.all():
        bad = int(np.argmin(same))
        where = tuple(int(v) for v in positions[bad])
        raise FeError(
            ValueError(
                f"{name} does not match the inputs (corrupted or edited case): at (n, c, h, w) = "
                f"{where} it holds {float(given[bad])!r}, but dy and w give "
                f"{float(recomputed[bad])!r}; "
                f"{int((~same).sum())} of {len(same)} checked elements differ"
            )
        )
