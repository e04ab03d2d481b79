"""pypto.torch.crosscheck: judge torch's own grad_input of every aten.convolution_backward call
by CANN's accuracy standards, skip what pypto's dgrad does not cover, localise a wrong one.

The overhead measurement (one ResNet-18-like bf16 training step, batch 2, 64x64, with and
without the cross-check) prints its numbers; run it alone with

    python tests/torch_interop/test_torch_crosscheck.py [repeats [torch threads]]
"""

import csv
import json
import time
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: pypto.torch needs it")
if getattr(torch, "__file__", None) is None:  # this folder, found as a namespace package when
    # tests/ is on sys.path and PyTorch is not installed
    pytest.skip("PyTorch is not installed: pypto.torch needs it", allow_module_level=True)

from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import pypto  # noqa: E402
import pypto.torch as pt  # noqa: E402
from pypto.bench.crosscheck import resnet18  # noqa: E402

CONV_BACKWARD = torch.ops.aten.convolution_backward.default


# --- helpers (kept here: the tests/ tree shares no helper modules with this folder) ---------------
class SmallCNN(nn.Module):
    """Stride, dilation, 1x1 and a grouped conv (which pypto's dgrad does not cover)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)  # input needs no grad
        self.down = nn.Conv2d(16, 32, 3, stride=2, padding=1)  # stride 2
        self.dilated = nn.Conv2d(32, 32, 3, padding=2, dilation=2)  # dilation 2
        self.grouped = nn.Conv2d(32, 32, 3, padding=1, groups=4)  # groups 4: skipped
        self.point = nn.Conv2d(32, 16, 1)  # 1x1
        self.bn = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        for conv in (self.stem, self.down, self.dilated, self.grouped):
            x = torch.relu(conv(x))
        x = torch.relu(self.bn(self.point(x)))
        return self.head(x.mean((2, 3)))


def small_cnn(seed=0, dtype=torch.bfloat16):
    torch.manual_seed(seed)
    return SmallCNN().to(dtype)


def batch(seed=1, dtype=torch.bfloat16, n=2, size=16):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(n, 3, size, size, generator=g).to(dtype),
        torch.randint(0, 10, (n,), generator=g),
    )


def train_step(model, x, labels):
    model.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(x).float(), labels)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def same_bits(a, b):
    return a.dtype == b.dtype and torch.equal(
        a.view(torch.int16) if a.element_size() == 2 else a,
        b.view(torch.int16) if b.element_size() == 2 else b,
    )


class CorruptGradInput(TorchDispatchMode):
    """Entered *outside* crosscheck: crosscheck's call to convolution_backward then reaches this
    mode, which lets torch compute and perturbs grad_input of the calls whose weight has
    ``weight_shape``: image ``image``, channels ``channels``, rows ``rows``, every column."""

    def __init__(self, weight_shape, image=1, channels=(0, 8), rows=(2, 4), delta=8.0):
        super().__init__()
        self.weight_shape, self.box, self.delta = list(weight_shape), (image, channels, rows), delta
        self.hits = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        hit = func is CONV_BACKWARD and list(args[2].shape) == self.weight_shape
        if hit and out[0] is not None:
            image, (c0, c1), (r0, r1) = self.box
            dx = out[0].clone()
            dx[image, c0:c1, r0:r1, :] += self.delta
            out = (dx, *out[1:])
            self.hits += 1
        return out


def resnet18_like(width=64, classes=10):
    """ResNet-18's layout (pypto.bench.crosscheck builds it, as torchvision lays it out)."""
    return resnet18(torch, classes=classes, width=width)


# --- the small CNN --------------------------------------------------------------------------------
def test_every_in_domain_call_is_judged_and_passes_and_nothing_changes(tmp_path):
    x, labels = batch()
    loss_plain, grads_plain = train_step(small_cnn(), x, labels)
    model = small_cnn()
    with warnings.catch_warnings():
        warnings.simplefilter("error", pt.CrosscheckWarning)
        with pt.crosscheck(
            standard="dual-L0", report=tmp_path / "xcheck.json", on_fail="warn"
        ) as xc:
            loss, grads = train_step(model, x, labels)
    print("\n" + xc.table())
    # torch computed everything as without the mode: same loss, same gradients, same bits
    assert torch.equal(loss, loss_plain)
    assert all(same_bits(grads[k], grads_plain[k]) for k in grads_plain)
    rows = xc.rows
    assert len(rows) == 5 and [r["call"] for r in rows] == list(range(5))
    by_weight = {tuple(r["weight"]): r for r in rows}
    for shape in ((32, 16, 3, 3), (32, 32, 3, 3), (16, 32, 1, 1)):  # stride, dilation, 1x1
        r = by_weight[shape]
        assert r["status"] == "pass" and r["passed"] is True, r
        assert r["verdicts"]["dual-L0"]["passed"] is True
        assert set(r["verdicts"]) == set(pypto.testing.STANDARDS)
        assert r["outside_bound"] == 0 and r["failing_tasks"] == [] and r["max_ulp"] < 8
        n, c, h, w = r["grad_input"]
        assert r["dtype"] == "bf16" and r["elements"] == n * c * h * w
    assert by_weight[(32, 16, 3, 3)]["strides"] == [2, 2]
    assert by_weight[(32, 32, 3, 3)]["dilations"] == [2, 2]
    assert by_weight[(32, 32, 3, 3)]["paddings"] == [2, 2, 2, 2]
    grouped = by_weight[(32, 8, 3, 3)]
    assert grouped["status"] == "skipped" and grouped["groups"] == 4
    assert grouped["rule"] == "G1" and "Invalid groups:4" in grouped["reason"]
    stem = by_weight[(16, 3, 3, 3)]
    assert stem["status"] == "skipped" and "grad_input not asked for" in stem["reason"]
    assert xc.summary() == {"calls": 5, "judged": 3, "passed": 3, "failed": 0, "skipped": 2}
    assert xc.failures == {}
    # the report, as JSON
    report = json.loads((tmp_path / "xcheck.json").read_text())
    assert report["summary"] == xc.summary() and report["standard"] == "dual-L0"
    assert [r["status"] for r in report["rows"]] == [r["status"] for r in rows]
    assert report["rows"][0]["grad_output"] == rows[0]["grad_output"]


def test_csv_report_and_standard_all(tmp_path):
    x, labels = batch()
    with pt.crosscheck(standard="all", report=str(tmp_path / "xcheck.CSV"), on_fail="raise"):
        train_step(small_cnn(), x, labels)
    with open(tmp_path / "xcheck.CSV", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows].count("pass") == 3
    assert {r["rule"] for r in rows if r["status"] == "skipped"} == {"G1", ""}
    judged = [r for r in rows if r["status"] == "pass"]
    for r in judged:
        assert all(r[f"verdict_{s}"] == "pass" for s in pypto.testing.STANDARDS)
        assert r["standard"] == "all" and r["outside_bound"] == "0" and r["failing_tasks"] == ""
    assert any(r["strides"] == "2 2" and r["paddings"] == "1 1 1 1" for r in judged)


def test_a_wrong_grad_input_fails_alone_and_is_localised(tmp_path):
    x, labels = batch()
    corrupt = CorruptGradInput((32, 32, 3, 3), image=1, channels=(0, 8), rows=(2, 4))
    with corrupt:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pt.crosscheck(report=tmp_path / "x.json", on_fail="warn") as xc:
                train_step(small_cnn(), x, labels)
    assert corrupt.hits == 1
    print("\n" + xc.table())
    failed = [r for r in xc.rows if r["status"] == "fail"]
    assert len(failed) == 1 and [r["status"] for r in xc.rows].count("pass") == 2
    row = failed[0]
    assert row["weight"] == [32, 32, 3, 3] and row["passed"] is False
    assert row["verdicts"]["dual-L0"]["passed"] is False
    assert row["tiles"]["vec"] == [16, 16, 16, 16]
    # exactly the perturbed box is outside the bound: image 1, channels 0-7, rows 2-3, 8 columns
    assert row["outside_bound"] == 8 * 2 * 8
    assert row["failing_tasks"], row
    for task in row["failing_tasks"]:
        assert task["image"] == 1
        assert task["channels"][0] <= 7 and task["channels"][1] >= 0
        assert task["rows"][0] <= 3 and task["rows"][1] >= 2
    assert sum(t["outside"] for t in row["failing_tasks"]) == row["outside_bound"]
    result = xc.failures[row["call"]]
    assert result.localisation.outside[1, 0:8, 2:4, :].all()
    assert result.localisation.outside_count == 128
    # one warning, for that call
    mine = [w for w in caught if issubclass(w.category, pt.CrosscheckWarning)]
    assert len(mine) == 1
    text = str(mine[0].message)
    assert f"call {row['call']}" in text and "fails dual-L0" in text and "image 1" in text
    report = json.loads((tmp_path / "x.json").read_text())
    assert report["summary"]["failed"] == 1
    assert report["rows"][row["call"]]["failing_tasks"] == row["failing_tasks"]


def test_on_fail_raise_stops_at_the_first_failing_call_after_recording_it(tmp_path):
    x, labels = batch()
    xc = pt.crosscheck(report=tmp_path / "x.csv", on_fail="raise")
    with CorruptGradInput((32, 16, 3, 3), image=0, channels=(8, 16), rows=(0, 1)):
        with pytest.raises(pt.CrosscheckError) as info:
            with xc:
                train_step(small_cnn(), x, labels)
    assert isinstance(info.value, AssertionError)
    assert info.value.row is xc.rows[-1] and xc.rows[-1]["status"] == "fail"
    assert xc.rows[-1]["weight"] == [32, 16, 3, 3]
    assert all(r["status"] != "fail" for r in xc.rows[:-1])
    # the stem's call (the last of the backward pass) never came: backward stopped there
    assert not any(r["weight"] == [16, 3, 3, 3] for r in xc.rows)
    assert "localisation" in str(info.value) and info.value.result.passed is False
    assert info.value.row["outside_bound"] == 8 * 1 * 16  # image 0, channels 8-15, row 0
    with open(tmp_path / "x.csv", newline="") as f:  # written at exit, on the exception too
        assert [r["status"] for r in csv.DictReader(f)][-1] == "fail"


# --- what is skipped, and why ---------------------------------------------------------------------
def test_calls_outside_the_domain_are_skipped_with_the_rule_or_reason():
    gen = torch.Generator().manual_seed(0)

    def grads(module, x):
        x = x.clone().requires_grad_()
        module(x).float().sum().backward()

    # on_fail="ignore": torch's own fp16 CPU dgrad is judged too, and torch 2.13's does not
    # accumulate in fp32 (elements outside the bound even on this small layer)
    with pt.crosscheck(on_fail="ignore") as xc:
        grads(nn.Conv2d(8, 8, 3, padding=1), torch.randn(1, 8, 6, 6, generator=gen))  # fp32
        grads(
            nn.ConvTranspose2d(8, 8, 3, stride=2).bfloat16(),
            torch.randn(1, 8, 5, 5, generator=gen).bfloat16(),
        )
        grads(nn.Conv1d(8, 8, 3).bfloat16(), torch.randn(1, 8, 9, generator=gen).bfloat16())
        grads(nn.Conv3d(8, 8, 3).bfloat16(), torch.randn(1, 8, 5, 5, 5, generator=gen).bfloat16())
        grads(nn.Conv2d(8, 16, 3).half(), torch.randn(1, 8, 6, 6, generator=gen).half())
        grads(
            nn.Conv2d(8, 8, 3, padding=(0, 1)).bfloat16(),
            torch.randn(1, 8, 6, 6, generator=gen).bfloat16(),
        )
    print("\n" + xc.table())
    fp32, transposed, conv1d, conv3d, fp16, pads = xc.rows
    assert fp32["status"] == "skipped" and fp32["rule"] == "D1" and fp32["dtype"] == "fp32"
    assert transposed["status"] == "skipped" and "transposed" in transposed["reason"]
    assert conv1d["status"] == "skipped" and conv1d["rule"] == "R1"
    assert conv3d["status"] == "skipped" and conv3d["rule"] == "R1"
    assert fp16["status"] in ("pass", "fail") and fp16["dtype"] == "fp16"  # judged
    assert pads["status"] == "pass" and pads["paddings"] == [0, 0, 1, 1]


def test_pypto_conv2d_calls_are_not_torchs_and_have_no_row():
    """Under pypto.torch.Conv2d grad_input is pypto's own operator's, not autograd's
    ConvolutionBackward0: the mode lists no call for it (and changes nothing); a torch conv
    beside it in the same backward is judged."""
    layer = pt.Conv2d(8, 16, 3, padding=1).bfloat16()
    torch_conv = nn.Conv2d(16, 8, 3, padding=1).bfloat16()
    x = torch.randn(2, 8, 6, 6).bfloat16().requires_grad_()
    with pt.crosscheck(on_fail="raise") as xc:
        torch_conv(layer(x)).float().sum().backward()
    assert [(r["weight"], r["status"]) for r in xc.rows] == [([8, 16, 3, 3], "pass")]
    assert x.grad is not None


def _one_conv_failing_steps(steps, **crosscheck_args):
    """``steps`` backward passes of one corrupted conv, without zeroing x.grad between them
    (torch adds each step's grad_input into the first one's tensor): (crosscheck, x, the
    grad_input each step's judging saw)."""
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 16, 3, padding=1).bfloat16()
    x = torch.randn(2, 16, 8, 8, dtype=torch.bfloat16, requires_grad=True)
    seen = []
    with CorruptGradInput((16, 16, 3, 3), image=0, channels=(0, 4), rows=(0, 2)):
        with pt.crosscheck(on_fail="ignore", **crosscheck_args) as xc:
            for _ in range(steps):
                conv(x).float().sum().backward()
                failed = [i for i, r in xc.failures.items() if r is not None]
                seen.append(xc.failures[failed[-1]].actual.copy() if failed else None)
    return xc, x, seen


def test_a_kept_failure_holds_what_was_judged_not_the_live_gradient():
    """Issue 42 #1: the first step's grad_input becomes x.grad and the second adds into it;
    the stored result must not share that memory."""
    xc, x, seen = _one_conv_failing_steps(2)
    assert sorted(xc.failures) == [0, 1] and all(r["status"] == "fail" for r in xc.rows)
    first = xc.failures[0]
    grad_bits = x.grad.view(torch.int16).numpy()
    assert not np.shares_memory(first.actual, grad_bits)
    assert same_bits(
        torch.from_numpy(first.actual.view(np.int16)), torch.from_numpy(seen[0].view(np.int16))
    )
    # the report's worst element lists what was judged, not step 1 + step 2
    judged = seen[0].astype(np.float64)
    worst = first.localisation.worst(1)[0]
    assert worst.actual in judged and worst.actual not in x.grad.double().numpy()


def test_only_keep_failures_results_are_kept_every_row_is():
    """Issue 42 #2: a result holds about 80 bytes per element; a loop under the mode keeps
    whole results for the first keep_failures failing calls, None for later ones, and a row
    for every call."""
    xc, _, _ = _one_conv_failing_steps(5, keep_failures=2)
    assert sorted(xc.failures) == [0, 1, 2, 3, 4] and len(xc.rows) == 5
    assert [r is not None for r in xc.failures.values()] == [True, True, False, False, False]
    assert all(r["status"] == "fail" and r["failing_tasks"] for r in xc.rows)
    xc, _, _ = _one_conv_failing_steps(2, keep_failures=0)
    assert xc.failures == {0: None, 1: None}
    default, _, _ = _one_conv_failing_steps(6)
    assert sum(r is not None for r in default.failures.values()) == 4
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(pypto.PyptoError, match="keep_failures must be an int >= 0"):
            pt.crosscheck(keep_failures=bad)


def test_a_meta_device_backward_runs_and_is_listed_as_skipped():
    """Issue 42 #3: meta tensors hold no data; the backward runs as it does without the mode."""
    with torch.device("meta"):
        conv = nn.Conv2d(8, 16, 3, stride=2, padding=1).half()
        x = torch.randn(1, 8, 9, 9, dtype=torch.float16, requires_grad=True)
    with pt.crosscheck(on_fail="raise") as xc:
        conv(x).float().sum().backward()
    assert x.grad.device.type == "meta" and list(x.grad.shape) == [1, 8, 9, 9]
    (row,) = xc.rows
    assert row["status"] == "skipped" and "meta device: no data to judge" in row["reason"]
    assert xc.failures == {}


def test_bad_arguments_are_pypto_errors(tmp_path):
    with pytest.raises(pypto.PyptoError):
        pt.crosscheck(standard="dual-L9")
    with pytest.raises(pypto.PyptoError):
        pt.crosscheck(on_fail="explode")
    with pytest.raises(pypto.PyptoError):
        pt.crosscheck(report=tmp_path / "missing" / "x.json")
    with pytest.raises(pypto.PyptoError):
        pt.crosscheck(report=3)


# --- overhead -------------------------------------------------------------------------------------
def measure_overhead(repeats=1):
    """Seconds of one ResNet-18-like bf16 training step (batch 2, 64x64) without and with the
    cross-check, after one warm-up step of each, the two alternating ``repeats`` times (the
    fastest of each counts); prints them and the cross-check's table."""
    torch.manual_seed(0)
    model = resnet18_like().bfloat16()
    x = torch.randn(2, 3, 64, 64).bfloat16()
    labels = torch.tensor([1, 7])
    train_step(model, x, labels)  # warm-up (allocations, oneDNN primitives, tile suggestions)
    with pt.crosscheck(on_fail="warn"):
        train_step(model, x, labels)
    plain, checked = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        train_step(model, x, labels)
        plain.append(time.perf_counter() - start)
        start = time.perf_counter()
        with pt.crosscheck(on_fail="warn") as xc:
            train_step(model, x, labels)
        checked.append(time.perf_counter() - start)
    judging = sum(r["seconds"] or 0 for r in xc.rows)
    t0, t1 = min(plain), min(checked)
    print(
        f"\nResNet-18-like bf16 training step, batch 2, 64x64, torch {torch.get_num_threads()} "
        f"thread(s), fastest of {repeats}: {t0 * 1e3:.0f} ms without crosscheck, "
        f"{t1 * 1e3:.0f} ms with ({t1 / t0:.1f}x; judging {judging * 1e3:.0f} ms in "
        f"{xc.summary()['judged']} calls); all runs, ms: without "
        f"{[round(t * 1e3) for t in plain]}, with {[round(t * 1e3) for t in checked]}"
    )
    print(xc.table())
    return t0, t1, xc


def test_resnet18_like_step_every_judged_call_passes_and_overhead_is_printed():
    t0, t1, xc = measure_overhead()
    s = xc.summary()
    # 20 convolutions; the stem's input needs no gradient: 19 grad_inputs judged
    assert s == {"calls": 20, "judged": 19, "passed": 19, "failed": 0, "skipped": 1}, xc.table()


if (
    __name__ == "__main__"
):  # python tests/torch_interop/test_torch_crosscheck.py [repeats [threads]]
    import sys

    if len(sys.argv) > 2:
        torch.set_num_threads(int(sys.argv[2]))
    measure_overhead(repeats=int(sys.argv[1]) if len(sys.argv) > 1 else 5)


def test_the_nodes_hooks_keep_no_graph_alive_repeat_with_the_graph_and_end_with_the_mode():
    """The mode hooks each ConvolutionBackward0 node as a backward starts: the hook holds
    what the node saved, not the node (a weight copy dies with its graph); a graph backwarded
    twice is judged twice and hooked once; a backward after the mode's exit adds no row."""
    import gc
    import weakref

    w = torch.randn(8, 8, 3, 3, requires_grad=True)
    x = torch.randn(1, 8, 6, 6).bfloat16().requires_grad_()
    with pt.crosscheck(on_fail="raise") as xc:
        copy = w.bfloat16()
        alive = weakref.ref(copy)
        loss = nn.functional.conv2d(x, copy, padding=1).float().sum()
        loss.backward()
    assert [r["status"] for r in xc.rows] == ["pass"]
    del copy, loss
    gc.collect()
    assert alive() is None
    conv = nn.Conv2d(8, 8, 3, padding=1).bfloat16()
    with pt.crosscheck(on_fail="raise") as xc:
        loss = conv(x).float().sum()
        loss.backward(retain_graph=True)
        torch.autograd.grad(loss, x, retain_graph=True)
    loss.backward()
    assert [r["status"] for r in xc.rows] == ["pass", "pass"]
    assert [r["call"] for r in xc.rows] == [0, 1]


def test_a_graph_partly_freed_before_the_mode_is_judged_where_it_runs():
    """A conv whose saved tensors a backward outside the mode already freed is not hooked
    (reading them would raise although this backward never reaches it); the one it reaches
    is judged."""
    first = nn.Conv2d(8, 8, 3, padding=1).bfloat16()
    second = nn.Conv2d(8, 4, 3, padding=1).bfloat16()
    x = torch.randn(1, 8, 6, 6).bfloat16().requires_grad_()
    hidden = first(x)
    out = second(hidden)
    hidden.float().sum().backward()  # frees first's saved tensors, outside the mode
    with pt.crosscheck(on_fail="raise") as xc:
        torch.autograd.grad(out.float().sum(), hidden)
    assert [(r["weight"], r["status"]) for r in xc.rows] == [([4, 8, 3, 3], "pass")]
