"""The fp16 / bf16 grids the judgement runs on (pypto/_golden/grid.py), against the tests' own
oracle (tests/support/reference.py: written from the formats' definitions, shares no code):
the once-rounded value and the spacing, on every binade, at and beside every midpoint, at the
range's ends and on non-finite values; and the metrics of a result, unchanged whether or not
one golden's grid serves several results."""

import ml_dtypes
import numpy as np
import pytest

from pypto._dtypes import DataType
from pypto._golden import accuracy
from pypto._golden.grid import golden_grid, grid_round, ulp_at, ulp_distance
from support.reference import round_once_f64, ulp

DTYPES = {"fp16": DataType.DT_FP16, "bf16": DataType.DT_BF16}
LIMITS = {"fp16": (10, -14, 15), "bf16": (7, -126, 127)}  # mantissa bits, emin, emax


def _values(name, n=200_000, seed=0):
    """Random values over every binade of the format and beyond it, the midpoints between grid
    neighbours, the doubles either side of those, and the edges of the range."""
    mantissa, emin, emax = LIMITS[name]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp2(rng.integers(emin - mantissa - 4, emax + 3, n))
    on_grid = round_once_f64(x, name)
    with np.errstate(invalid="ignore", over="ignore"):
        mids = on_grid + 0.5 * ulp(on_grid, name) * rng.choice([-1.0, 1.0], n)
    largest = (2 - 2.0**-mantissa) * 2.0**emax
    edges = [0.0, -0.0, 2.0**emin, -(2.0**emin), 2.0 ** (emin - 1), 2.0 ** (emin - mantissa)]
    edges += [2.0 ** (emin - mantissa - 1), largest, largest + 2.0 ** (emax - mantissa - 1)]
    edges += [np.nextafter(largest + 2.0 ** (emax - mantissa - 1), 0), 1e300, 5e-324]
    parts = [x, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), np.array(edges)]
    return np.concatenate(parts + [-np.array(edges)])


@pytest.mark.parametrize("name", DTYPES)
def test_grid_round_is_one_round_to_nearest_even(name):
    values = _values(name)
    with np.errstate(invalid="ignore"):
        want = round_once_f64(values, name)
    got = grid_round(values, DTYPES[name])
    finite = np.isfinite(values)
    assert np.array_equal(got[finite], want[finite])
    assert np.array_equal(np.signbit(got[finite]), np.signbit(want[finite]))  # -0 stays -0
    special = np.array([np.inf, -np.inf, np.nan])
    assert np.array_equal(grid_round(special, DTYPES[name]), special, equal_nan=True)


@pytest.mark.parametrize("name", DTYPES)
def test_ulp_at_is_the_spacing_of_the_grid_zero_included(name):
    mantissa, emin, _ = LIMITS[name]
    values = _values(name, seed=1)
    values = values[np.isfinite(values) & (np.abs(values) <= 2.0 ** LIMITS[name][2] * 2)]
    # on the grid, the oracle's spacing
    on_grid = round_once_f64(values, name)
    on_grid = on_grid[np.isfinite(on_grid)]
    assert np.array_equal(ulp_at(on_grid, DTYPES[name]), ulp(on_grid, name))
    # anywhere: 2^(floor(log2 |v|) - mantissa bits), the exponent held to the format's range
    _, exponent = np.frexp(values)
    binade = np.clip(np.where(values == 0, emin, exponent - 1), emin, LIMITS[name][2])
    assert np.array_equal(ulp_at(values, DTYPES[name]), np.ldexp(1.0, binade - mantissa))
    # a golden of exactly 0 has the subnormal spacing, not that of the binade of 0.5
    assert ulp_at(np.array([0.0, -0.0]), DTYPES[name]).tolist() == [2.0 ** (emin - mantissa)] * 2
    assert ulp_at(np.array([np.inf, np.nan]), DTYPES[name]).tolist() == [np.inf, np.inf]


@pytest.mark.parametrize("name", DTYPES)
def test_distance_counts_the_representable_values_between(name):
    """The distance from a result to the rounded golden, against stepping through the grid
    with the storage type's own nextafter."""
    np_dtype = np.float16 if name == "fp16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(2)
    golden = rng.standard_normal(300) * 4
    start = round_once_f64(golden, name).astype(np_dtype)
    steps = rng.integers(-40, 41, golden.size)
    actual = start.copy()
    for i, k in enumerate(steps):
        for _ in range(abs(k)):
            actual[i] = np.nextafter(actual[i], np_dtype(np.inf if k > 0 else -np.inf))
    want = np.abs(steps)
    # -0 and +0 are one value: a walk across zero counts it once
    crossed = np.sign(start.astype(np.float64)) != np.sign(actual.astype(np.float64))
    want = np.where(crossed & (start != 0) & (actual != 0), want - 1, want)
    assert np.array_equal(ulp_distance(actual, golden, DTYPES[name]), want)


@pytest.mark.parametrize("name", DTYPES)
def test_one_grid_for_several_results_changes_no_metric(name):
    dtype = DTYPES[name]
    np_dtype = np.float16 if name == "fp16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(3)
    golden = rng.standard_normal((2, 8, 20, 20)) * np.exp2(rng.integers(-30, 4, (2, 8, 20, 20)))
    golden.reshape(-1)[:4] = [np.inf, np.nan, 0.0, -np.inf]
    results = []
    for noise in (1e-3, 3e-2):
        with np.errstate(invalid="ignore"):
            results.append(
                round_once_f64(
                    golden * (1 + noise * rng.standard_normal(golden.shape)), name
                ).astype(np_dtype)
            )
    grid = golden_grid(golden, dtype)
    for actual in results:
        alone = accuracy.measure(accuracy.element_errors(actual, golden, dtype), golden, dtype)
        shared = accuracy.measure(
            accuracy.element_errors(actual, golden, dtype, grid), golden, dtype, grid
        )
        assert alone == shared
