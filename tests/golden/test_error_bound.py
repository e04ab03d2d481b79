"""The fp32-accumulation error bound: its float32 GEMM never below the exact sum|dy w|, the
float64 fallback, and the localisation deciding "outside" from the bound at the elements above
the ulp term alone (``pypto._golden.bound.ErrorBound``) exactly as from every element's."""

import ml_dtypes
import numpy as np
import pytest

import pypto.testing as T
from pypto._golden import bound as _bound
from pypto._golden.case import U32, draw_inputs, error_bound, golden_dgrad, make_case, pypto_dgrad
from pypto._golden.grid import MANTISSA_BITS, golden_grid
from support.reference import dgrad_abs_reference

PROBLEMS = [
    # grad_output, weight, input_size, strides, paddings, dilations
    ([2, 32, 12, 12], [32, 40, 3, 3], [2, 40, 12, 12], [1, 1], [1, 1, 1, 1], [1, 1]),
    ([1, 256, 5, 5], [256, 48, 3, 3], [1, 48, 10, 10], [2, 2], [1, 1, 1, 1], [1, 1]),
    ([2, 16, 6, 6], [16, 24, 3, 3], [2, 24, 8, 8], [1, 1], [1, 1, 1, 1], [2, 2]),
    ([1, 16, 7, 7], [16, 8, 1, 1], [1, 8, 7, 7], [1, 1], [0, 0, 0, 0], [1, 1]),
]


def _case(problem, dtype, dist="uniform", seed=0):
    case = make_case(*problem[:3], dtype, *problem[3:])
    dy, w = draw_inputs(case, dist, seed)
    return case, dy, w


def _exact_bound(case, dy, w, golden):
    """The bound from the float64 oracle's sum|dy w| (the definition)."""
    p = case.problem
    size = dgrad_abs_reference(
        dy, w, (p.hin, p.win), case.strides, (case.paddings[0], case.paddings[2]), case.dilations
    )
    accumulation = case.k_terms * U32 * (1.0 + 2.0 ** -(MANTISSA_BITS[case.dtype] + 1))
    return size * accumulation + golden_grid(golden, case.dtype).ulp


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("dist", ["uniform", "normal", "ints"])
@pytest.mark.parametrize("problem", PROBLEMS, ids=["3x3", "strided", "dilated", "1x1"])
def test_the_float32_bound_is_never_below_the_exact_one(problem, dtype, dist):
    case, dy, w = _case(problem, dtype, dist)
    golden = golden_dgrad(case, dy, w)
    exact = _exact_bound(case, dy, w, golden)
    fast = error_bound(case, dy, w, golden)
    assert (fast >= exact).all()
    assert (fast <= exact * (1 + 1e-3)).all()  # and barely above it


@pytest.mark.parametrize("value", [1e-39, 3e37], ids=["below float32's normals", "huge"])
def test_inputs_float32_cannot_sum_safely_take_float64(value):
    """A bf16 input below float32's normal range (a flush-to-zero would drop it) or products
    near float32's overflow: the bound is summed in float64, as the definition."""
    case, dy, w = _case(PROBLEMS[0], "bf16")
    dy = dy.copy()
    dy[0, 0, 5, 5] = ml_dtypes.bfloat16(value)
    golden = golden_dgrad(case, dy, w)
    exact = _exact_bound(case, dy, w, golden)
    assert np.allclose(error_bound(case, dy, w, golden), exact, rtol=1e-12, atol=0)


def _outside_from_every_element(result):
    """outside as the localisation decided it before: |a - g| / bound > 1 over every element,
    the bound computed from the float64 oracle."""
    case = result.case
    golden = result.golden
    bound = _exact_bound(case, *result._inputs, golden)
    errors = result.localisation.errors
    with np.errstate(invalid="ignore", divide="ignore"):
        over = np.where(errors.mismatch, np.inf, np.where(bound > 0, errors.abs / bound, 0.0))
    return np.nan_to_num(over, nan=0.0, posinf=np.inf) > 1


def _judge(case, dy, w, actual):
    p = case
    result = T.compare(
        actual,
        dy,
        w,
        list(p.input_size),
        list(p.strides),
        list(p.paddings),
        list(p.dilations),
        tiles=(p.l1, p.l0),
    )
    result._inputs = (dy, w)
    return result


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(
    "fault", ["none", "one ulp here and there", "a few elements", "a NaN", "every element"]
)
def test_outside_from_the_elements_above_the_ulp_term_is_outside_from_every_element(dtype, fault):
    case, dy, w = _case(PROBLEMS[0], dtype, "normal", seed=3)
    actual = pypto_dgrad(case, dy, w)
    rng = np.random.default_rng(0)
    flat = actual.reshape(-1)
    bits = flat.view(np.uint16)
    if fault == "one ulp here and there":  # two ulps off at random elements: some outside
        picked = rng.choice(flat.size, 40, replace=False)
        bits[picked] += 2
    elif fault == "a few elements":
        picked = rng.choice(flat.size, 12, replace=False)
        flat[picked] = (flat[picked].astype(np.float32) * 1.5 + 0.01).astype(flat.dtype)
    elif fault == "a NaN":
        flat[7] = np.nan
    elif fault == "every element":
        flat[:] = (flat.astype(np.float32) * 1.01 + 0.001).astype(flat.dtype)
    result = _judge(case, dy, w, actual)
    loc = result.localisation
    want = _outside_from_every_element(result)
    assert np.array_equal(loc.outside, want)
    assert loc.outside_count == int(want.sum())
    assert (loc.over_bound > 1).sum() == loc.outside_count  # made from every element's bound
    if fault == "every element":
        assert loc._bound.direct is None  # too many elements above the ulp term: the GEMM
    else:
        assert loc._bound.direct is not None and loc._bound.direct < flat.size // 10


def test_the_whole_bound_is_made_only_when_asked_for_and_from_the_judged_inputs():
    """Passing judgements compute no GEMM for the bound; over_bound, worst() and the heatmap
    make it later from the result's own copies of the inputs, whatever the caller's arrays
    hold by then."""
    case, dy, w = _case(PROBLEMS[0], "bf16", "normal", seed=1)
    dy, w = dy.copy(), w.copy()
    result = _judge(case, dy, w, pypto_dgrad(case, dy, w))
    loc = result.localisation
    assert result.passed and loc._bound._full is None
    loc.as_dict(0)
    assert loc._bound._full is None  # no worst element asked for
    golden = result.golden.copy()
    want = _exact_bound(case, dy.copy(), w.copy(), golden)
    dy[...] = 0
    w[...] = 0
    got = loc._bound.full()
    assert (got >= want).all() and (got <= want * (1 + 1e-3)).all()
    assert loc.worst(1)[0].over_bound <= 1


def test_direct_share_limit_is_a_small_share():
    assert 0 < _bound.DIRECT_SHARE <= 0.05
