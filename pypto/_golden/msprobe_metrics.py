"""msprobe's accuracy columns of a result against a benchmark, under msprobe's names and by its
definitions, so that pypto's tables and msprobe's compare CSV can be read side by side.

Written (not copied) from mindstudio-probe 26.2.0's ``msprobe/core/compare/``: each column's
``algorithm/builtin_algorithm/alg_*.py``; ``utils.py`` (``flatten_numpy``, ``validate_numpy``,
``get_relative_err``, ``calc_relative_err_ratio``); ``npy_compare.py`` (``handle_inf_nan`` and
``ValidateTensor``: the checks before any column is computed); ``core/common/utils.py``
(``format_value``: 12 decimal places) and ``core/common/const.py`` (the names and thresholds).

- ``Cosine``: dot(a, b) / (|a| |b|) in float64; 1.0 when both norms are <= float64's eps,
  "Nan" when one is (or the quotient is NaN); rounded to 12 decimals, to 6 above 0.9999.
- ``EucDist``: |a - b| (2-norm) in float64, not rounded.
- ``MaxAbsErr``: max |a - b| in float64, 12 decimals.
- ``MaxRelativeErr``: max |a - b| / |b|, computed in the wider of the two dtypes and float32;
  where b == 0 both sides get that dtype's eps added first. 12 decimals.
- ``One Thousandth Err Ratio`` / ``Five Thousandths Err Ratio``: the share of elements whose
  relative error (as above) is < 0.001 / < 0.005, 12 decimals.

Before any of them: NaN and Inf at the same places in both (the sign of an Inf not compared)
become 0 on both sides; at different places every column is "N/A". An empty tensor gives
"unsupported" everywhere. msprobe squeezes a tensor as it reads it, so a one-element tensor is
a scalar to it: only MaxAbsErr and MaxRelativeErr are computed, the others are "unsupported".

pypto computes them with its float64 golden as the benchmark (msprobe: a second dump). As
msprobe reads a tensor, bf16 (which NumPy has no dtype of its own for) becomes float32 and the
NumPy float dtypes stay what they are.
"""

import numpy as np

from .._dtypes import DataType, numpy_dtype
from .elementwise import msprobe_pass
from .grid import pattern_values

_BF16 = numpy_dtype(DataType.DT_BF16)

__all__ = [
    "COLUMNS",
    "COSINE",
    "EUC_DIST",
    "MAX_ABS_ERR",
    "MAX_RELATIVE_ERR",
    "ONE_THOUSANDTH",
    "FIVE_THOUSANDTHS",
    "NAN",
    "N_A",
    "UNSUPPORTED",
    "msprobe_metrics",
    "empty_metrics",
]

COSINE = "Cosine"
EUC_DIST = "EucDist"
MAX_ABS_ERR = "MaxAbsErr"
MAX_RELATIVE_ERR = "MaxRelativeErr"
ONE_THOUSANDTH = "One Thousandth Err Ratio"
FIVE_THOUSANDTHS = "Five Thousandths Err Ratio"
COLUMNS = (COSINE, EUC_DIST, MAX_ABS_ERR, MAX_RELATIVE_ERR, ONE_THOUSANDTH, FIVE_THOUSANDTHS)
THRESHOLDS = {ONE_THOUSANDTH: 0.001, FIVE_THOUSANDTHS: 0.005}

# msprobe's words for a value it cannot give
NAN = "Nan"  # a column's own computation met a NaN or a zero norm
N_A = "N/A"  # NaN/Inf at different places in the two tensors
UNSUPPORTED = "unsupported"  # an empty tensor; a scalar for the columns that need a vector

_NORM_EPS = float(np.finfo(np.float64).eps)  # Cosine: a norm at most this is a zero vector
_COSINE_ROUND_ABOVE = 0.9999  # above this, Cosine is rounded to 6 decimals


def empty_metrics():
    """The columns of a call that was not judged: all None."""
    return dict.fromkeys(COLUMNS)


def _decimals12(value):
    """msprobe's ``format_value``: the value printed with 12 decimals, read back."""
    return float(f"{value:.12f}")


def _as_float(array):
    """NumPy's own float dtypes stay; any other (bf16) becomes float32, exactly."""
    array = np.asarray(array)
    if array.dtype in (np.float16, np.float32, np.float64):
        return array
    return array.astype(np.float32)


def _relative(npu, bench, difference=None):
    """|npu - bench| / |bench| in the wider of their dtypes and float32, eps of that dtype
    added to both where bench is 0 (so there: |(npu + eps) - eps| / eps). ``difference``:
    npu - bench in float64, reused when that is the dtype."""
    kind = np.result_type(npu, bench, np.float32)
    n, b = npu.astype(kind, copy=False), bench.astype(kind, copy=False)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if difference is None or kind != np.float64:
            difference = n - b
        relative = np.abs(difference / b)
        zero = b == 0
        if zero.any():
            eps = np.finfo(kind).eps
            relative[zero] = np.abs(((n[zero] + eps) - eps) / eps)
    return relative


def _maximum(values):
    top = float(np.max(values))
    return NAN if np.isnan(top) else _decimals12(top)


def _cosine(dot, n_norm, b_norm):
    """msprobe's Cosine from dot(n, b) and the two norms."""
    if n_norm <= _NORM_EPS and b_norm <= _NORM_EPS:
        return 1.0
    if n_norm <= _NORM_EPS or b_norm <= _NORM_EPS:
        return NAN
    with np.errstate(invalid="ignore", over="ignore"):
        cosine = np.float64(dot) / (np.float64(n_norm) * b_norm)
    if np.isnan(cosine):
        return NAN
    cosine = _decimals12(cosine)
    return round(cosine, 6) if cosine > _COSINE_ROUND_ABOVE else cosine


# fp16 / bf16 results against a float64 benchmark (pypto's golden): msprobe computes all in
# float64 there, and one compiled pass (elementwise.msprobe_pass) gives every sum and count
_PASS_DTYPES = {np.dtype(np.float16): DataType.DT_FP16, np.dtype(_BF16): DataType.DT_BF16}


def _in_one_pass(npu, bench):
    """The columns from ``elementwise.msprobe_pass`` (its sums in blocks, as documented
    there, where NumPy's dot products sum in BLAS's order)."""
    values = pattern_values(_PASS_DTYPES[npu.dtype])
    bits = np.ascontiguousarray(npu).view(np.uint16).reshape(-1)
    sums = msprobe_pass(bits, values, np.ascontiguousarray(bench).reshape(-1))
    if sums is None:
        return dict.fromkeys(COLUMNS, N_A)
    size = bits.size
    return {
        COSINE: _cosine(sums["dot"], float(np.sqrt(sums["nn"])), float(np.sqrt(sums["bb"]))),
        EUC_DIST: float(np.sqrt(sums["dd"])),
        MAX_ABS_ERR: _maximum(sums["max_abs"]),
        MAX_RELATIVE_ERR: _maximum(sums["max_rel"]),
        ONE_THOUSANDTH: _decimals12(sums["below_1e3"] / size),
        FIVE_THOUSANDTHS: _decimals12(sums["below_5e3"] / size),
    }


def msprobe_metrics(npu, bench):
    """{column: value} of :data:`COLUMNS` for ``npu`` (the result) against ``bench`` (the
    benchmark; pypto: its float64 golden), arrays of one shape: a float, or msprobe's word
    "Nan", "N/A" or "unsupported" (see the module's docstring)."""
    npu, bench = np.asarray(npu), np.asarray(bench)
    if npu.shape != bench.shape:
        raise ValueError(f"shapes differ: {npu.shape} and {bench.shape}")
    if npu.size > 1 and npu.dtype in _PASS_DTYPES and bench.dtype == np.float64:
        return _in_one_pass(npu, bench)
    npu, bench = _as_float(npu), _as_float(bench)
    if npu.size == 0:
        return dict.fromkeys(COLUMNS, UNSUPPORTED)
    n, b = npu.reshape(-1), bench.reshape(-1)
    if npu.size == 1:  # a scalar once squeezed: no NaN/Inf step, no float64 either
        with np.errstate(invalid="ignore", over="ignore"):
            absolute = np.abs(n - b)
        return {
            **dict.fromkeys(COLUMNS, UNSUPPORTED),
            MAX_ABS_ERR: _maximum(absolute),
            MAX_RELATIVE_ERR: _maximum(_relative(n, b)),
        }
    n_inf, b_inf, n_nan, b_nan = np.isinf(n), np.isinf(b), np.isnan(n), np.isnan(b)
    if n_inf.any() or b_inf.any() or n_nan.any() or b_nan.any():
        if not (np.array_equal(n_inf, b_inf) and np.array_equal(n_nan, b_nan)):
            return dict.fromkeys(COLUMNS, N_A)
        n, b = n.copy(), b.copy()
        n[n_inf | n_nan] = 0
        b[b_inf | b_nan] = 0
    n64, b64 = n.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
    difference = n64 - b64
    relative = _relative(n, b, difference)
    ratios = {
        column: _decimals12(np.count_nonzero(relative < limit) / relative.size)
        for column, limit in THRESHOLDS.items()
    }
    with np.errstate(invalid="ignore", over="ignore"):
        norms = float(np.linalg.norm(n64)), float(np.linalg.norm(b64))
        cosine = _cosine(np.dot(n64, b64), *norms)
    return {
        COSINE: cosine,
        EUC_DIST: float(np.linalg.norm(difference)),
        MAX_ABS_ERR: _maximum(np.abs(difference)),
        MAX_RELATIVE_ERR: _maximum(relative),
        **ratios,
    }
