"""The judgement's compiled pass (pypto/_golden/elementwise.pyx) against the metrics' written
definitions (pypto/_golden/accuracy.py's text), computed here element by element in plain
float64 NumPy on the tests' own grid (tests/support/reference.py): every binade of both
formats, midpoints, the ends of the range, subnormals, overflow, NaN and Inf on either side.
Counts and maxima must be equal; sums, within the float64 error of summing ~10^5 terms. And
msprobe's columns from the pass against msprobe_metrics' NumPy path on the same values."""

import ml_dtypes
import numpy as np
import pytest

from pypto._dtypes import DataType
from pypto._golden import accuracy
from pypto._golden.accuracy import ABOVE_KEPT, ULP_BINS
from pypto._golden.msprobe_metrics import COLUMNS, msprobe_metrics
from support.reference import round_once, round_once_f64, ulp

DTYPES = {"fp16": DataType.DT_FP16, "bf16": DataType.DT_BF16}
NP_DTYPES = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}
LIMITS = {"fp16": (10, -14, 15), "bf16": (7, -126, 127)}  # mantissa bits, emin, emax
TOL = {"fp16": 2.0**-9, "bf16": 2.0**-6}  # single-2026-07's atol = rtol
SMALL = {"fp16": 2.0**-11, "bf16": 2.0**-8}  # the dual standard's small-value limit


def _golden(name, rng, shape):
    """A float64 golden over every binade of the format and beyond, with exact midpoints,
    the range's ends, zeros and NaN / Inf."""
    mantissa, emin, emax = LIMITS[name]
    n = int(np.prod(shape))
    g = rng.standard_normal(n) * np.exp2(rng.integers(emin - mantissa - 3, emax + 2, n))
    with np.errstate(invalid="ignore", over="ignore"):
        on_grid = round_once_f64(g, name)
        mids = on_grid + 0.5 * ulp(on_grid, name) * rng.choice([-1.0, 1.0], n)
    pick = rng.random(n)
    g = np.where(pick < 0.2, mids, g)
    g = np.where((pick > 0.2) & (pick < 0.25), 0.0, g)
    g = np.where(np.isfinite(g), g, 1.0)
    largest = (2 - 2.0**-mantissa) * 2.0**emax
    g[:8] = [np.nan, np.inf, -np.inf, largest, -largest, 2.0**emin, 2.0 ** (emin - mantissa), 0.0]
    g[8] = largest + 2.0 ** (emax - mantissa - 1)  # rounds to Inf
    return g.reshape(shape)


def _actual(name, golden, rng):
    """The golden with noise of a few ulps, a few wild elements, NaN / Inf placed so that some
    match the golden and some do not."""
    noise = 1 + np.where(rng.random(golden.shape) < 0.05, 0.1, 2.0**-8) * rng.standard_normal(
        golden.shape
    )
    with np.errstate(invalid="ignore", over="ignore"):
        a = round_once(golden * noise, name)
    flat = a.reshape(-1)
    flat[:3] = np.array([np.nan, np.inf, 5.0]).astype(a.dtype)  # NaN ok, +Inf ok, finite vs -Inf
    flat[9:12] = np.array([np.inf, np.nan, -0.0]).astype(a.dtype)
    return a


def _spacing(value, name):
    """ulp(g) as accuracy's text defines it: 2^(floor(log2 |g|) - mantissa bits), the
    exponent held to the format's range (zero: the subnormal spacing)."""
    mantissa, emin, emax = LIMITS[name]
    with np.errstate(divide="ignore"):
        _, exponent = np.frexp(value)
    exponent = np.where(value == 0, emin, exponent - 1)
    return np.exp2(np.clip(exponent, emin, emax) - mantissa)


def _oracle(name, actual, golden):
    """Every per-element quantity and metric, from the definitions."""
    a = actual.astype(np.float64).reshape(-1)
    g = golden.reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        r = round_once_f64(np.where(np.isfinite(g), g, 0.0), name)
    r = np.where(np.isfinite(g), r, g)  # NaN and Inf stay
    value = np.where(np.isfinite(g), g, 0.0)
    mag = np.abs(value)
    spacing = _spacing(value, name)
    finite = np.isfinite(a) & np.isfinite(r)
    same = (np.isnan(a) & np.isnan(r)) | (a == r)
    mismatch = ~finite & ~same
    with np.errstate(invalid="ignore"):
        err = np.where(finite, np.abs(a - value), np.where(mismatch, np.inf, 0.0))
    rel = err / (mag + 1e-7)
    ulps = err / spacing
    # the distance in representable values: count the grid points between a and r
    bits = actual.reshape(-1).view(np.uint16).astype(np.int64)
    r_bits = round_once(np.where(finite, r, 0.0), name).view(np.uint16).astype(np.int64)

    def line(b):
        return np.where(b & 0x8000, -(b & 0x7FFF), b)

    distance = np.abs(line(bits) - line(r_bits))[finite]
    histogram = {}
    for lo, hi, label in ULP_BINS:
        top = distance.max(initial=0) if hi is None else hi
        histogram[label] = int(np.count_nonzero((distance >= lo) & (distance <= top)))
    small = finite & (mag < SMALL[name])
    large = finite & ~small
    total = err.size
    return {
        "err": err,
        "ulps": ulps,
        "metrics": {
            "compared": int(finite.sum()),
            "nonfinite_mismatch": int(mismatch.sum()),
            "nonfinite_equal": int(total - finite.sum() - mismatch.sum()),
            "mare": rel[finite].max(),
            "mere": rel[finite].mean(),
            "rmse": np.sqrt(np.mean(err[finite] ** 2)),
            "max_abs": err[finite].max(),
            "max_ulp": ulps[finite].max(),
            "ulp_histogram": histogram,
            "share_rel_below_1e3": np.count_nonzero(rel < 1e-3) / total,
            "share_rel_below_1e2": np.count_nonzero(rel < 1e-2) / total,
            "share_within_2026_07": np.count_nonzero(err <= TOL[name] * (1 + mag)) / total,
            "large": {
                "mare": rel[large].max(),
                "mere": rel[large].mean(),
                "rmse": np.sqrt(np.mean(err[large] ** 2)),
            },
            "small_values": int(small.sum()),
            "small_errors": int(np.count_nonzero(small & (err > 2.0**-16))),
        },
    }


SUMS = {"mere", "rmse"}  # float64 sums: another order of the same terms


def _same(got, want, key):
    if isinstance(want, dict):
        assert set(got) == set(want), key
        for k in want:
            _same(got[k], want[k], f"{key}.{k}")
    elif key.split(".")[-1] in SUMS:
        assert got == pytest.approx(want, rel=1e-12, abs=0), key
    else:
        assert got == want, key


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_the_pass_computes_the_written_definitions(name, seed):
    rng = np.random.default_rng(seed)
    golden = _golden(name, rng, (3, 5, 40, 53))
    actual = _actual(name, golden, rng)
    want = _oracle(name, actual, golden)
    errors = accuracy.element_errors(actual, golden, DTYPES[name])
    metrics = accuracy.measure(errors, golden, DTYPES[name])
    for field, value in want["metrics"].items():
        _same(getattr(metrics, field), value, field)
    assert metrics.elements == golden.size
    # the arrays of every element, made when asked for, and the row maxima made by the pass
    assert np.array_equal(errors.abs.reshape(-1), want["err"])
    assert np.array_equal(errors.ulp.reshape(-1), want["ulps"])
    shape = golden.shape
    assert np.array_equal(errors.row_max_abs, want["err"].reshape(shape).max(axis=3))
    assert np.array_equal(errors.row_max_ulp, want["ulps"].reshape(shape).max(axis=3))
    above = np.flatnonzero(want["ulps"] > 1)
    assert errors.sums["above_1ulp"] == above.size
    if above.size <= ABOVE_KEPT:
        flat, err, ulps = errors.above
        assert np.array_equal(flat, above)
        assert np.array_equal(err, want["err"][above]) and np.array_equal(ulps, want["ulps"][above])
    else:
        assert errors.above is None
    assert np.array_equal(errors.mismatch.reshape(-1), want["err"] == np.inf)


@pytest.mark.parametrize("name", DTYPES)
def test_the_listed_elements_above_one_ulp_stop_at_what_is_kept(name):
    rng = np.random.default_rng(5)
    golden = rng.standard_normal((1, 4, 64, 64)) + 4.0
    actual = round_once(golden * (1 + 0.05 * rng.standard_normal(golden.shape)), name)
    errors = accuracy.element_errors(actual, golden, DTYPES[name])
    assert errors.sums["above_1ulp"] > ABOVE_KEPT and errors.above is None


def _plain_path(npu, bench):
    """msprobe_metrics by its NumPy path: the result as float32 (bf16 is read so by msprobe
    anyway; fp16 -> float32 is exact and the columns are computed in float64 either way)."""
    return msprobe_metrics(npu.astype(np.float32), bench)


@pytest.mark.parametrize("name", DTYPES)
def test_msprobes_columns_from_the_pass_match_its_numpy_path(name):
    rng = np.random.default_rng(7)
    golden = rng.standard_normal((2, 16, 30, 30)) * np.exp2(rng.integers(-12, 4, (2, 16, 30, 30)))
    golden.reshape(-1)[:50] = 0.0
    actual = round_once(golden * (1 + 2.0**-8 * rng.standard_normal(golden.shape)), name)
    for npu, bench in [(actual, golden), (actual, np.zeros_like(golden))]:
        got, want = msprobe_metrics(npu, bench), _plain_path(npu, bench)
        assert set(got) == set(COLUMNS)
        for column in COLUMNS:
            if isinstance(want[column], str):
                assert got[column] == want[column], column
            else:
                assert got[column] == pytest.approx(want[column], rel=1e-12, abs=1e-12), column


@pytest.mark.parametrize("name", DTYPES)
def test_msprobes_non_finite_rules_in_the_pass(name):
    golden = np.array([1.0, np.nan, np.inf, 2.0])
    same = np.array([1.0, np.nan, -np.inf, 2.0]).astype(NP_DTYPES[name])  # Inf sign not compared
    apart = np.array([1.0, 2.0, np.inf, np.nan]).astype(NP_DTYPES[name])
    for npu in (same, apart):
        assert msprobe_metrics(npu, golden) == _plain_path(npu, golden)
    assert set(msprobe_metrics(apart, golden).values()) == {"N/A"}
