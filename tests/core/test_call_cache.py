"""The cache of passed calls (issue 27, item 5): a repeated call skips the rule table, and
nothing it remembers changes a verdict.

A call broken in one rule must be refused with that rule even right after the same problem,
unbroken, passed; values the rules judge by type (NumPy integers, floats) are never matched to
remembered plain ints; every array check still runs on a remembered call.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pypto
from pypto._core import rules
from pypto._kernels import dispatch
from support import strategies as S

P = dict(go=[1, 16, 5, 32], size=[1, 16, 5, 32], w=[16, 16, 3, 3])
ATTRS = ([1, 1], [1, 1, 1, 1], [1, 1])


@pytest.fixture(autouse=True)
def _tiles():
    with pypto.options(
        convbp_tile_shapes=(
            pypto.pypto_impl.ConvBpTileL1Info(160, 144, 16),
            pypto.pypto_impl.ConvBpTileL0Info(160, 128, 16),
        ),
        vec_tile_shapes=[16, 16, 16, 16],
    ):
        yield


def _validate(go=None, size=None, w=None, dtype=pypto.DT_FP16, attrs=ATTRS, groups=1):
    go = pypto.Tensor(P["go"] if go is None else go, dtype)
    w = pypto.Tensor(P["w"] if w is None else w, dtype)
    return rules.validate_conv_backward_input(
        go, P["size"] if size is None else size, w, dtype, *attrs, groups
    )


def test_a_repeated_call_returns_the_remembered_verdict():
    first = _validate()
    assert _validate() is first  # the table did not run again: the same object
    # equal values in fresh lists and tensors are the same call
    assert _validate(go=list(P["go"]), size=tuple(P["size"])) is not first  # tuple: own key
    assert _validate(size=list(P["size"])) is first


@pytest.mark.parametrize(
    "size",
    [
        [np.int64(1), 16, 5, 32],  # judged by T1's int conversion, not matched to ints
        [1, 16, 5, 32.0],
        [True, 16, 5, 32],
    ],
)
def test_values_the_rules_judge_by_type_are_never_matched_to_ints(size):
    _validate()  # the plain-int call is remembered
    key = rules._call_key(
        pypto.Tensor(P["go"], pypto.DT_FP16),
        size,
        pypto.Tensor(P["w"], pypto.DT_FP16),
        pypto.DT_FP16,
        *ATTRS,
        1,
    )
    assert key is None
    try:
        passed = _validate(size=size)
    except pypto.PyptoError as exc:
        assert exc.rule == "T1"  # the float and the bool: refused, as without the cache
    else:
        assert passed.problem == _validate().problem  # np.int64(1) is an int to the rules


def test_changed_tiles_are_a_new_call():
    _validate()
    with pypto.options(
        convbp_tile_shapes=(
            pypto.pypto_impl.ConvBpTileL1Info(160, 144, 16),
            pypto.pypto_impl.ConvBpTileL0Info(160, 128, 32),  # tileNL0 > tileNL1
        )
    ):
        with pytest.raises(pypto.PyptoError) as exc:
            _validate()
        assert exc.value.rule.startswith("TS")
    with pypto.options(vec_tile_shapes=[16, 16, 16, 17]):
        with pytest.raises(pypto.PyptoError) as exc:
            _validate()
        assert exc.value.rule == "V1"


def test_a_tensor_subclass_is_judged_every_time():
    class Lying(pypto.Tensor):
        pass

    go = Lying(P["go"], pypto.DT_FP16)
    w = pypto.Tensor(P["w"], pypto.DT_FP16)
    assert rules._call_key(go, P["size"], w, pypto.DT_FP16, *ATTRS, 1) is None


def test_the_memory_stays_bounded():
    for n in range(1, rules._PASSED_MAX + 40):
        _validate(go=[n, 16, 5, 32], size=[n, 16, 5, 32])
        assert len(rules._PASSED) <= rules._PASSED_MAX
        assert len(dispatch._PLANS) <= dispatch._PLANS_MAX
        assert len(dispatch._PLAN_OF_CALL) <= dispatch._PLANS_MAX


def test_a_plan_is_found_by_its_call_object_and_only_by_it():
    first = _validate()
    plan = dispatch._plan_of(first)
    assert plan.call is first and dispatch._plan_of(first) is plan
    # an equal call judged afresh (a NumPy integer: no cache key) is another object: a plan of
    # its own, holding it, with the same kernel arguments
    twin = _validate(size=[np.int64(1), 16, 5, 32])
    assert twin is not first and twin == first
    twin_plan = dispatch._plan_of(twin)
    assert twin_plan.call is twin and twin_plan is not plan
    assert (twin_plan.kernel_tiles, twin_plan.shapes) == (plan.kernel_tiles, plan.shapes)
    # an id that a dead call object had is not taken for another's: the entry holds its call
    assert dispatch._PLAN_OF_CALL[id(twin)].call is twin


def test_every_array_check_still_runs_on_a_remembered_call():
    rng = np.random.default_rng(0)
    dy = rng.standard_normal(P["go"]).astype(np.float16)
    w = rng.standard_normal(P["w"]).astype(np.float16)
    args = (pypto.from_numpy(dy), P["size"], pypto.from_numpy(w), pypto.DT_FP16, *ATTRS)
    good = pypto.conv_backward_input(*args).numpy()
    call = rules.validate_conv_backward_input(*args)
    assert rules.validate_conv_backward_input(*args) is call  # remembered
    # the backend still compares the buffers with the remembered problem
    with pytest.raises(pypto.PyptoError, match="shape"):
        dispatch.conv_backward_input_cpu(call, dy[:, :, :4], w)
    with pytest.raises(pypto.PyptoError, match="dtype"):
        dispatch.conv_backward_input_cpu(call, dy.astype(np.float32), w)
    assert np.array_equal(pypto.conv_backward_input(*args).numpy(), good)
    # arrays the kernel cannot read as they are pass the backend's first test of a small call
    # only by being copied: the same result
    for dy_other, w_other in (
        (dy.astype(dy.dtype.newbyteorder()), w),  # byte-swapped
        (dy, np.asfortranarray(w)),
        (dy[..., ::-1].copy()[..., ::-1], w),  # a negatively strided view
    ):
        out = dispatch.conv_backward_input_cpu(call, dy_other, w_other)
        assert np.array_equal(out, good)


def test_without_the_compiled_key_every_call_is_judged_in_full(monkeypatch):
    """The unbuilt source tree has no callkey module: no cache, the same verdicts."""
    monkeypatch.setattr(rules, "_call_key", None)
    first = _validate()
    assert _validate() is not first and _validate() == first
    with pytest.raises(pypto.PyptoError) as exc:
        _validate(size=[1, 16, 5, 32.0])
    assert exc.value.rule == "T1"


@pytest.mark.parametrize("rule", S.RULE_IDS)
@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_a_broken_call_is_refused_right_after_its_unbroken_twin_passed(rule, data):
    case = data.draw(S.valid_cases(min_kernel=2 if rule == "A4" else 1), label="valid")
    case.run()  # passes, and is remembered
    case.run()
    broken = case.copy()
    broken.how = S.BREAKERS[rule](data.draw, broken, False)
    broken.rule = rule
    with pytest.raises(pypto.PyptoError) as exc:
        broken.run()
    assert exc.value.rule == rule, broken
    with pytest.raises(pypto.PyptoError) as again:  # refusals are never remembered
        broken.run()
    assert again.value.rule == rule
