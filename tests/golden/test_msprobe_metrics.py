"""msprobe's accuracy columns (pypto._golden.msprobe_metrics): each definition on cases whose
answer is worked out by hand, on random data against the definitions written out here with
math.fsum, and, where msprobe is installed, against msprobe's own column functions."""

import math

import ml_dtypes
import numpy as np
import pytest

from pypto._golden.msprobe_metrics import COLUMNS, msprobe_metrics

COS, EUC, ABS, REL, ONE, FIVE = COLUMNS
F32_EPS, F64_EPS = 2.0**-23, 2.0**-52


def test_the_names_are_msprobes():
    assert COLUMNS == (
        "Cosine",
        "EucDist",
        "MaxAbsErr",
        "MaxRelativeErr",
        "One Thousandth Err Ratio",
        "Five Thousandths Err Ratio",
    )


def test_worked_by_hand():
    same = np.array([3.0, 4.0], np.float32)
    assert msprobe_metrics(same, same) == {
        COS: 1.0,
        EUC: 0.0,
        ABS: 0.0,
        REL: 0.0,
        ONE: 1.0,
        FIVE: 1.0,
    }
    # orthogonal; the bench's 0 gets float32's eps on both sides: |1 + eps - eps| / eps = 2^23
    got = msprobe_metrics(np.array([1.0, 0.0], np.float32), np.array([0.0, 1.0], np.float32))
    assert got == {COS: 0.0, EUC: math.sqrt(2), ABS: 1.0, REL: 2.0**23, ONE: 0.0, FIVE: 0.0}
    # against a float64 bench, float64's eps: 1 / 2^-52
    got = msprobe_metrics(np.array([1.0, 2.0], np.float32), np.array([0.0, 2.002]))
    assert got[REL] == 2.0**52 and got[ABS] == 1.0
    # relative errors 0.0004, 0.002 and 0.01: one below 0.001, two below 0.005
    bench = np.array([1.0, 1.0, 1.0])
    got = msprobe_metrics(np.array([1.0004, 1.002, 1.01]), bench)
    assert (got[ONE], got[FIVE]) == (round(1 / 3, 12), round(2 / 3, 12))
    assert got[REL] == round(0.01, 12) and got[ABS] == round(0.01, 12)


def test_cosine_rounding_and_zero_vectors():
    # above 0.9999: 6 decimals; below: 12
    a, b = np.array([1.0, 0.0]), np.array([1.0, 1e-3])
    assert msprobe_metrics(a, b)[COS] == round(1 / math.sqrt(1 + 1e-6), 6) == 1.0
    a, b = np.array([1.0, 0.0]), np.array([1.0, 0.1])
    assert msprobe_metrics(a, b)[COS] == round(1 / math.sqrt(1.01), 12)
    zero = np.zeros(4)
    assert msprobe_metrics(zero, zero)[COS] == 1.0
    assert msprobe_metrics(zero, np.ones(4))[COS] == "Nan"
    assert msprobe_metrics(np.ones(4), zero)[COS] == "Nan"


def test_nan_and_inf():
    a = np.array([1.0, np.nan, np.inf, 2.0])
    b = np.array([1.5, np.nan, -np.inf, 2.0])  # the same places (an Inf's sign is not compared)
    got = msprobe_metrics(a, b)
    assert got[ABS] == 0.5 and got[EUC] == 0.5  # NaN and Inf became 0 on both sides
    assert got[REL] == round(0.5 / 1.5, 12) and got[ONE] == 0.75
    b[0] = np.nan  # a NaN where the other has none: nothing can be said
    assert msprobe_metrics(a, b) == dict.fromkeys(COLUMNS, "N/A")


def test_empty_and_one_element():
    assert msprobe_metrics(np.zeros((0, 3)), np.zeros((0, 3))) == dict.fromkeys(
        COLUMNS, "unsupported"
    )
    # one element is a scalar to msprobe (it squeezes): only the two maxima
    got = msprobe_metrics(np.array([[3.0]], np.float16), np.array([[2.0]], np.float16))
    assert got == {
        COS: "unsupported",
        EUC: "unsupported",
        ABS: 1.0,
        REL: 0.5,
        ONE: "unsupported",
        FIVE: "unsupported",
    }


def plain(npu, bench):
    """The definitions written out for finite arrays with a non-zero bench: float64 sums by
    math.fsum, relative errors in float64 (a float64 bench), Cosine rounded (12 decimals, 6
    above 0.9999)."""
    a = [float(v) for v in np.asarray(npu, np.float64).ravel()]
    b = [float(v) for v in np.asarray(bench, np.float64).ravel()]
    cosine = math.fsum(x * y for x, y in zip(a, b)) / math.sqrt(
        math.fsum(x * x for x in a) * math.fsum(y * y for y in b)
    )
    cosine = round(cosine, 12)
    relative = [abs(x - y) / abs(y) for x, y in zip(a, b)]
    return {
        COS: round(cosine, 6) if cosine > 0.9999 else cosine,
        EUC: math.sqrt(math.fsum((x - y) ** 2 for x, y in zip(a, b))),
        ABS: max(abs(x - y) for x, y in zip(a, b)),
        REL: max(relative),
        ONE: sum(r < 0.001 for r in relative) / len(relative),
        FIVE: sum(r < 0.005 for r in relative) / len(relative),
    }


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_random_results_against_a_float64_golden(dtype):
    rng = np.random.default_rng(3)
    golden = rng.standard_normal((2, 5, 7, 9))
    golden[np.abs(golden) < 1e-3] = 0.5  # a non-zero bench: the eps rule is tested above
    actual = golden.astype(dtype)
    actual.flat[::17] = (golden.flat[::17] * 1.004).astype(dtype)
    got, want = msprobe_metrics(actual, golden), plain(actual, golden)
    assert got[COS] == pytest.approx(want[COS], abs=2e-12)
    assert got[EUC] == pytest.approx(want[EUC], rel=1e-12)
    for column in (ABS, REL, ONE, FIVE):
        assert got[column] == pytest.approx(round(want[column], 12), abs=1e-12), column


def test_msprobes_own_functions_agree():
    """msprobe's own checks and columns (its compare_ops_apply), where it is installed."""
    npy_compare = pytest.importorskip("msprobe.core.compare.npy_compare")

    def theirs(n, b):
        checked = npy_compare.ValidateTensor().check_tensor(
            npy_compare.CompareResult(np.squeeze(n).copy(), np.squeeze(b).copy())
        )
        values, _ = npy_compare.compare_ops_apply(
            checked.n_value,
            checked.b_value,
            checked.error_flag,
            checked.err_msg,
            column_names=list(COLUMNS),
        )
        return dict(zip(COLUMNS, values))

    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = (a + rng.standard_normal(a.shape).astype(np.float32) * 1e-3).astype(np.float32)
    b[0, 0, 0, :2] = 0
    nan_a, nan_b = a.copy(), b.copy()
    nan_a[1, 1, 1, 1] = nan_b[1, 1, 1, 1] = np.nan
    nan_a[0, 1, 1, 1], nan_b[0, 1, 1, 1] = np.inf, -np.inf
    moved = nan_b.copy()
    moved[0, 0, 0, 3] = np.nan
    pairs = [
        (a, b),
        (a.astype(np.float16), b.astype(np.float16)),
        (a, b.astype(np.float64)),
        (nan_a, nan_b),
        (nan_a, moved),
        (np.zeros(10, np.float32), np.zeros(10, np.float32)),
        (np.zeros(10, np.float32), np.ones(10, np.float32)),
        (np.array([3.0], np.float16), np.array([0.0], np.float16)),
        (a, a),
    ]
    for n, bench in pairs:
        assert msprobe_metrics(n, bench) == theirs(n, bench), (n.dtype, bench.dtype)
    # bf16 as msprobe reads it (float32)
    bf = a.astype(ml_dtypes.bfloat16)
    assert msprobe_metrics(bf, b.astype(np.float64)) == theirs(
        bf.astype(np.float32), b.astype(np.float64)
    )
