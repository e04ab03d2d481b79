"""pypto.torch.crosscheck at training speed: sampling (``every``), a time budget (``budget``)
and module names in the rows (``model``)."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: pypto.torch needs it")
if getattr(torch, "__file__", None) is None:  # tests/torch_interop seen as a namespace package
    pytest.skip("PyTorch is not installed: pypto.torch needs it", allow_module_level=True)

from test_torch_crosscheck import (  # noqa: E402
    CorruptGradInput,
    batch,
    resnet18_like,
    small_cnn,
    train_step,
)

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
        {"images": 0},
        {"images": 1.5},
        {"images": True},
        {"images": "2"},
    ],
)
def test_bad_sampling_arguments_are_pypto_errors(kwargs):
    with pytest.raises(pypto.PyptoError):
        pt.crosscheck(**kwargs)


def test_every_takes_what_pypto_counts_as_an_int():
    """NumPy integers count, as for every other int argument of pypto (pypto._core.values)."""
    import numpy as np

    assert pt.crosscheck(every=np.int64(3)).every == 3


# --- images=: a sample of each judged call's batch ----------------------------------------------
def test_images_go_round_the_batch_and_the_rows_say_which():
    """images=1 on a batch of 4: the k-th judgement of each layer takes image k (mod 4), the
    row lists it and counts only its elements; images >= the batch judges every image."""
    model = _model()
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(2)).bfloat16()
    labels = torch.tensor([1, 7, 3, 0])
    xc = pt.crosscheck(images=1, model=model)
    for _ in range(5):
        with xc:
            train_step(model, x, labels)
    judged = [r for r in xc.rows if r["status"] in ("pass", "fail")]
    assert len(judged) == 5 * 19 and all(r["status"] == "pass" for r in judged)
    for module in _conv_names(model) - {"conv1"}:
        mine = [r for r in judged if r["module"] == module]
        assert [r["images"] for r in mine] == [[0], [1], [2], [3], [0]], module
        n, c, h, w = mine[0]["grad_input"]
        assert all(r["elements"] == c * h * w for r in mine)
    assert all(r["images"] is None for r in xc.rows if r["status"] == "skipped")
    assert "images 0" in xc.table()
    with pt.crosscheck(images=4) as whole:
        train_step(model, x, labels)
    assert all(r["images"] == "all" for r in whole.rows if r["status"] == "pass")


def test_images_and_every_rotate_each_layer_on_its_own_turns():
    """every=2, images=2 on a batch of 4: a layer judged in passes 0, 2 (or 1, 3) sees images
    0-1, then 2-3; with a wrap (batch 3) the sample is sorted."""
    model = _model()
    x = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(2)).bfloat16()
    xc = pt.crosscheck(images=2, every=2, model=model)
    with xc:
        for _ in range(4):
            train_step(model, x, torch.tensor([1, 2, 3]))
    for module in _conv_names(model) - {"conv1"}:
        mine = [r["images"] for r in xc.rows if r["module"] == module and r["status"] == "pass"]
        assert mine == [[0, 1], [0, 2]], module


def _corrupted_steps(steps, image, **crosscheck_args):
    """``steps`` steps of the small CNN on a batch of 4, grad_input of its 32x32 3x3 conv
    corrupted in ``image`` (channels 0-7, rows 2-3): the crosscheck and that conv's rows."""
    model = small_cnn()
    x, labels = batch(n=4)
    xc = pt.crosscheck(on_fail="ignore", model=model, **crosscheck_args)
    with CorruptGradInput((32, 32, 3, 3), image=image, channels=(0, 8), rows=(2, 4)):
        for _ in range(steps):
            with xc:
                train_step(model, x, labels)
    return xc, [r for r in xc.rows if r["weight"] == [32, 32, 3, 3]]


@pytest.mark.parametrize("images", [1, 3])
def test_an_error_in_a_judged_image_is_caught_and_named_by_its_batch_index(images):
    xc, rows = _corrupted_steps(4, image=2, images=images)
    for row in rows:
        if 2 not in row["images"]:  # not claimed where the wrong image was not judged
            assert row["status"] == "pass" and row["outside_bound"] == 0, row
            continue
        assert row["status"] == "fail" and row["verdicts"]["dual-L0"]["passed"] is False
        assert row["outside_bound"] == 8 * 2 * 8  # exactly the box, as with every image
        assert {t["image"] for t in row["failing_tasks"]} == {2}
        regions = [g for t in row["failing_tasks"] for g in t["regions"]]
        assert regions and all(
            g["image"] == 2 and g["where"].startswith("image 2,") for g in regions
        )
        result = xc.failures[row["call"]]
        position = row["images"].index(2)  # the judged arrays hold the sample, in order
        assert result.localisation.outside[position, 0:8, 2:4, :].all()
        assert result.localisation.image_id(position) == 2
        assert "image 2," in result.report() and "images 2" not in result.report().split("(")[0]
    caught = [r for r in rows if r["status"] == "fail"]
    assert len(caught) == (1 if images == 1 else 3)  # image 2 judged in steps 2 (and 0, 3)
    assert [2 in r["images"] for r in rows] == [r["status"] == "fail" for r in rows]


def test_a_call_the_op_refuses_names_no_images():
    """The small CNN's grouped convolution is refused (rule G1): skipped, no images."""
    with pt.crosscheck(images=1) as xc:
        train_step(small_cnn(), *batch(n=4))
    refused = [r for r in xc.rows if r["rule"]]
    assert refused and all(r["images"] is None for r in refused)
    assert all(r["images"] == [0] for r in xc.rows if r["status"] == "pass")


def test_a_failure_in_a_sample_says_which_images_were_judged():
    model = small_cnn()
    x, labels = batch(n=4)
    with CorruptGradInput((32, 32, 3, 3), image=1, channels=(0, 8), rows=(2, 4)):
        with pytest.raises(pt.CrosscheckError) as info:
            with pt.crosscheck(on_fail="raise", images=2):
                train_step(model, x, labels)
    message = str(info.value)
    assert (
        "bf16, images 0, 1)" in message and "regions: image 1, channels 0-15, rows 2-3" in message
    )
    assert "(images 0, 1)" in message  # the localisation's grid line


def test_the_benchmarks_images_option():
    """``python -m pypto.bench.crosscheck --images 1,2`` times each sampling with each (its
    run takes minutes: only the options are tested here)."""
    from pypto.bench.crosscheck import _parse

    args = _parse(["--every", "1,10", "--budget", "0.3", "--images", "1,2"])
    assert args.every == [1, 10] and args.budget == [0.3] and args.images == [1, 2]
    assert _parse([]).images == []
    for bad in ("0", "x"):
        with pytest.raises(SystemExit):
            _parse(["--images", bad])
