"""pypto.torch.crosscheck at training speed: sampling (``every``), a time budget (``budget``)
and module names in the rows (``model``)."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: pypto.torch needs it")
if getattr(torch, "__file__", None) is None:  # tests/torch_interop seen as a namespace package
    pytest.skip("PyTorch is not installed: pypto.torch needs it", allow_module_level=True)

from test_torch_crosscheck import resnet18_like, train_step  # noqa: E402

import pypto  # noqa: E402
import pypto.torch as pt  # noqa: E402

nn = torch.nn


def _model(dtype=torch.bfloat16):
    torch.manual_seed(0)
    model = resnet18_like(width=8)
    return model if dtype is None else model.to(dtype)


def _batch(dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(1)
    return torch.randn(2, 3, 32, 32, generator=g).to(dtype), torch.tensor([1, 7])


def _conv_names(model):
    return {name for name, m in model.named_modules() if isinstance(m, nn.Conv2d)}


@pytest.mark.parametrize("every", [1, 3, 4, 7])
@pytest.mark.parametrize("entries", ["one with", "a with a step"])
def test_every_judges_each_layer_once_in_every_passes(every, entries):
    """Pass s judges the calls j of its backward with (j + s) % every == 0: one in ``every``,
    and after ``every`` passes each layer has been judged once (the stem never: its input
    needs no gradient), whether the mode is entered once or once a step."""
    model = _model()
    x, labels = _batch()
    xc = pt.crosscheck(every=every, model=model)
    if entries == "one with":
        with xc:
            for _ in range(every):
                train_step(model, x, labels)
    else:
        for _ in range(every):
            with xc:
                train_step(model, x, labels)
    assert len(xc.rows) == 20 * every  # 20 convolutions a pass
    stem = {r["call"] for r in xc.rows if r["reason"] and "output_mask" in r["reason"]}
    want = {i for i in range(20 * every) if (i % 20 + i // 20) % every == 0} - stem
    judged = {r["call"] for r in xc.rows if r["status"] in ("pass", "fail")}
    assert judged == want
    for r in xc.rows:
        if r["call"] not in want | stem:
            assert r["status"] == "skipped" and r["reason"] == f"not sampled (every={every})"
            assert r["max_ulp"] is None and r["call"] not in xc.failures
    modules = [r["module"] for r in xc.rows if r["call"] in judged]
    assert sorted(modules) == sorted(_conv_names(model) - {"conv1"})  # each once


def test_a_budget_of_the_whole_time_judges_everything_and_a_tiny_one_almost_nothing():
    model = _model()
    x, labels = _batch()
    with pt.crosscheck(budget=1.0) as full:  # judging is part of the time inside: always within
        train_step(model, x, labels)
    assert full.summary()["judged"] == 19
    with pt.crosscheck(budget=1e-9) as tiny:
        train_step(model, x, labels)
    assert tiny.summary()["judged"] == 1  # the first call: nothing judged yet, within budget
    over = [r for r in tiny.rows if r["reason"] and r["reason"].startswith("over the time budget")]
    assert len(over) == 18


def test_the_budget_counts_every_with_of_the_mode():
    model = _model()
    x, labels = _batch()
    xc = pt.crosscheck(budget=1e-9)
    for _ in range(2):
        with xc:
            train_step(model, x, labels)
    assert xc.summary()["judged"] == 1  # the second step starts over budget


@pytest.mark.parametrize("autocast", [False, True], ids=["bf16 model", "fp32 model, autocast"])
def test_rows_name_the_module_that_ran_the_convolution(autocast):
    model = _model(None if autocast else torch.bfloat16)
    x, labels = _batch(torch.float32 if autocast else torch.bfloat16)
    with pt.crosscheck(model=model) as xc:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = nn.functional.cross_entropy(model(x).float(), labels)
        loss.backward()
    modules = dict(model.named_modules())
    for r in xc.rows:
        assert r["module"] in modules, r
        assert list(modules[r["module"]].weight.shape) == r["weight"], r
    assert {r["module"] for r in xc.rows} == _conv_names(model)


def test_a_backward_alone_in_the_mode_names_modules_by_their_weights():
    """Without the forward in the mode the weight given to the backward is the parameter
    itself (no autocast): its module is named."""
    model = _model()
    x, labels = _batch()
    loss = nn.functional.cross_entropy(model(x).float(), labels)
    with pt.crosscheck(model=model) as xc:
        loss.backward()
    assert {r["module"] for r in xc.rows} == _conv_names(model)


def test_without_a_model_rows_name_no_module():
    model = _model()
    with pt.crosscheck() as xc:
        train_step(model, *_batch())
    assert all(r["module"] is None for r in xc.rows)


def test_hooks_are_removed_at_exit():
    model = _model()
    with pt.crosscheck(model=model):
        train_step(model, *_batch())
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"every": 0},
        {"every": 1.5},
        {"every": True},
        {"budget": 0},
        {"budget": 1.5},
        {"budget": "0.3"},
        {"model": "resnet"},
    ],
)
def test_bad_sampling_arguments_are_pypto_errors(kwargs):
    with pytest.raises(pypto.PyptoError):
        pt.crosscheck(**kwargs)


def test_every_takes_what_pypto_counts_as_an_int():
    """NumPy integers count, as for every other int argument of pypto (pypto._core.values)."""
    import numpy as np

    assert pt.crosscheck(every=np.int64(3)).every == 3
