"""pypto.torch: conv2d_input, the pypto::conv_backward_input operator (opcheck, autograd,
torch.compile), conv2d / Conv2d, and the op's domain errors."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: pypto.torch needs it")
if getattr(torch, "__file__", None) is None:  # this folder, found as a namespace package when
    # tests/ is on sys.path and PyTorch is not installed
    pytest.skip("PyTorch is not installed: pypto.torch needs it", allow_module_level=True)

import pypto  # noqa: E402
import pypto._convbp  # noqa: E402
import pypto.testing  # noqa: E402
import pypto.torch as pt  # noqa: E402
from pypto.pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info  # noqa: E402

F = torch.nn.functional
OP = torch.ops.pypto.conv_backward_input.default


# --- helpers (kept here: the tests/ tree shares no helper modules with this folder) ---------------
def _out_size(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def make_problem(dtype, n, cin, cout, hw, k, stride=1, padding=0, dilation=1, seed=0, extra=(0, 0)):
    """grad_output, weight and input_size of a conv2d dgrad; ``extra`` adds rows/columns the
    forward's floor division drops (input sizes above the smallest valid one)."""
    g = torch.Generator().manual_seed(seed)
    s, p, d = (
        stride if isinstance(stride, tuple) else (stride, stride),
        padding if isinstance(padding, tuple) else (padding, padding),
        dilation if isinstance(dilation, tuple) else (dilation, dilation),
    )
    kh, kw = (k, k) if isinstance(k, int) else k
    h, w = (hw, hw) if isinstance(hw, int) else hw
    h, w = h + extra[0], w + extra[1]
    hout, wout = _out_size(h, kh, s[0], p[0], d[0]), _out_size(w, kw, s[1], p[1], d[1])
    dy = torch.randn(n, cout, hout, wout, generator=g).to(dtype)
    wt = (torch.randn(cout, cin, kh, kw, generator=g) / (cin * kh * kw) ** 0.5).to(dtype)
    return dy, wt, [n, cin, h, w], s, p, d


def bits(t):
    """The tensor's 16-bit patterns, for bitwise comparison (NaN-safe)."""
    return t.contiguous().view(torch.int16)


def four(p):
    return [p[0], p[0], p[1], p[1]]


def pypto_direct(dy, w, input_size, s, p, d, tiles=None):
    """pypto.conv_backward_input itself, on the same data, as a torch tensor."""
    pdy, pw = pypto.from_torch(dy), pypto.from_torch(w)
    if tiles is None:
        tiles = pypto.suggest_convbp_input_tile_shapes(
            pdy.shape, pw.shape, input_size, pdy.dtype, list(s), four(p), list(d)
        )
    with pypto.options(convbp_tile_shapes=tiles, vec_tile_shapes=[16, 16, 16, 16]):
        out = pypto.conv_backward_input(pdy, input_size, pw, pdy.dtype, list(s), four(p), list(d))
    array = out.numpy()
    if dy.dtype == torch.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


# name: dtype, n, cin, cout, hw, k, stride, padding, dilation, extra input rows/cols
PROBLEMS = {
    "bf16-3x3-s1-p1": (torch.bfloat16, 2, 8, 16, 9, 3, 1, 1, 1, (0, 0)),
    "fp16-3x3-s2-p1": (torch.float16, 2, 16, 16, 9, 3, 2, 1, 1, (1, 0)),
    "bf16-3x3-d2-p2": (torch.bfloat16, 1, 16, 32, 10, 3, 1, 2, 2, (0, 0)),
    "fp16-1x1-p0": (torch.float16, 2, 32, 16, 6, 1, 1, 0, 1, (0, 0)),
    "bf16-7x7-s2-p3": (torch.bfloat16, 1, 3, 16, 16, 7, 2, 3, 1, (0, 1)),
    "fp16-3x3-s21-d12-p01": (torch.float16, 1, 16, 16, (8, 11), 3, (2, 1), (0, 1), (1, 2), (1, 0)),
}


def problem(name, seed=0):
    dtype, n, cin, cout, hw, k, s, p, d, extra = PROBLEMS[name]
    return make_problem(dtype, n, cin, cout, hw, k, s, p, d, seed=seed, extra=extra)


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts the CPU kernel's runs (to show a refused call computed nothing)."""
    real = pypto._convbp._cpu()
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(pypto._convbp, "_cpu_compute", counting)
    return calls


# --- torch stays optional -------------------------------------------------------------------------
def _run_python(code):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        # not the checkout's root: `python -c` puts the current folder first on sys.path, and
        # CI tests the installed package, not the unbuilt source tree
        cwd=os.path.dirname(os.path.abspath(__file__)),
    )


def test_import_pypto_does_not_import_torch():
    done = _run_python("""
        import sys, pypto
        assert "torch" not in sys.modules, "import pypto imported torch"
        import pypto.torch
        assert "torch" in sys.modules
        print("ok")
    """)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


def test_pypto_works_without_torch_and_pypto_torch_says_why():
    done = _run_python("""
        import sys
        class NoTorch:                       # torch is not installed, as far as Python knows
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ModuleNotFoundError(f"No module named {name!r}")
        sys.meta_path.insert(0, NoTorch())
        import numpy as np, pypto
        dy, w = np.ones((1, 16, 4, 4), np.float16), np.ones((16, 16, 1, 1), np.float16)
        tiles = pypto.suggest_convbp_input_tile_shapes([1, 16, 4, 4], [16, 16, 1, 1],
                                                       [1, 16, 4, 4], pypto.DT_FP16, [1, 1],
                                                       [0, 0, 0, 0], [1, 1])
        with pypto.options(convbp_tile_shapes=tiles, vec_tile_shapes=[16, 16, 16, 16]):
            out = pypto.conv_backward_input(pypto.from_numpy(dy), [1, 16, 4, 4],
                                            pypto.from_numpy(w), pypto.DT_FP16, [1, 1],
                                            [0, 0, 0, 0], [1, 1])
        assert (out.numpy() == 16).all()
        try:
            import pypto.torch
        except ImportError as exc:
            assert "needs PyTorch" in str(exc), exc
            print("ok")
    """)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


# --- the operator ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_opcheck(name):
    dy, w, input_size, s, p, d = problem(name)
    args = (dy.requires_grad_(), input_size, w.requires_grad_(), list(s), four(p), list(d), 1)
    result = torch.library.opcheck(OP, args)
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_conv2d_input_is_pypto_bit_for_bit_and_torch_within_the_bound(name):
    dy, w, input_size, s, p, d = problem(name)
    ours = pt.conv2d_input(input_size, w, dy, stride=s, padding=p, dilation=d)
    assert ours.dtype == dy.dtype and ours.device == dy.device
    assert list(ours.shape) == input_size and ours.is_contiguous()
    assert torch.equal(bits(ours), bits(pypto_direct(dy, w, input_size, s, p, d)))
    # the operator with pypto's conventions gives the same bits
    assert torch.equal(bits(ours), bits(OP(dy, input_size, w, list(s), four(p), list(d), 1)))
    # inside the fp32-accumulation bound of pypto's float64 golden, and so is torch's bf16
    mine = pypto.testing.compare(ours, dy, w, input_size, list(s), four(p), list(d))
    assert mine.passed and mine.localisation.outside_count == 0, mine.report()
    if dy.dtype == torch.bfloat16:
        theirs = torch.nn.grad.conv2d_input(input_size, w, dy, s, p, d)
        judged = pypto.testing.compare(theirs, dy, w, input_size, list(s), four(p), list(d))
        assert judged.localisation.outside_count == 0, judged.report()
        assert judged.passed, judged.report()


def test_conv2d_input_takes_torch_conventions_and_any_layout():
    dy, w, input_size, s, p, d = problem("bf16-3x3-s1-p1")
    want = pt.conv2d_input(input_size, w, dy, 1, 1, 1)
    for args in (
        (torch.Size(input_size), w, dy, (1, 1), (1, 1), (1, 1)),
        (
            tuple(input_size),
            w.contiguous(memory_format=torch.channels_last),
            dy.contiguous(memory_format=torch.channels_last),
            [1, 1],
            1,
            [1, 1],
        ),
        (input_size, w, dy.transpose(2, 3).contiguous().transpose(2, 3), 1, (1, 1), 1),
        (input_size, w.requires_grad_(), dy.clone().requires_grad_(), 1, 1, 1),
    ):
        assert torch.equal(bits(pt.conv2d_input(*args)), bits(want))
    # torch.neg's lazy negation view is resolved, not misread
    neg = pt.conv2d_input(input_size, w.detach(), torch._neg_view(dy), 1, 1, 1)
    assert torch.equal(bits(neg), bits(pt.conv2d_input(input_size, w.detach(), -dy, 1, 1, 1)))


def test_the_callers_tiles_are_used_when_set(kernel_calls):
    dy, w, input_size, s, p, d = problem("fp16-1x1-p0")
    suggested = pypto.suggest_convbp_input_tile_shapes(
        list(dy.shape), list(w.shape), input_size, pypto.DT_FP16, list(s), four(p), list(d)
    )
    other = (ConvBpTileL1Info(36, 32, 16), ConvBpTileL0Info(16, 16, 16))
    assert other[0].as_tuple() != suggested[0].as_tuple()
    with pypto.options(convbp_tile_shapes=other, vec_tile_shapes=[1, 1, 16, 16]):
        got = pt.conv2d_input(input_size, w, dy, s, p, d)
    assert torch.equal(bits(got), bits(pypto_direct(dy, w, input_size, s, p, d, tiles=other)))
    # tiles that break a rule are refused, by that rule: they were used, not replaced
    with pypto.options(
        convbp_tile_shapes=(ConvBpTileL1Info(36, 40, 16), ConvBpTileL0Info(16, 16, 16))
    ):
        with pytest.raises(pypto.PyptoError) as info:
            pt.conv2d_input(input_size, w, dy, s, p, d)
    assert info.value.rule == "TS3"
    pypto.set_vec_tile_shapes(16, 16, 16, 15)  # a vector tile of the caller's, illegal: V1
    with pytest.raises(pypto.PyptoError) as info:
        pt.conv2d_input(input_size, w, dy, s, p, d)
    assert info.value.rule == "V1"
    assert len(kernel_calls) == 2  # pypto.torch's and pypto's own above; none refused ran
    # unset again: the suggested tiles and [16, 16, 16, 16], and the settings are left alone
    pypto.reset_options()
    pt.conv2d_input(input_size, w, dy, s, p, d)
    assert pypto.get_vec_tile_shapes() == []
    assert not any(pypto.get_convbp_input_tile_shapes()[0].as_tuple())


def test_repeated_calls_reuse_one_scope_and_check_call_hands_out_its_own_dict():
    """The options scope of a call's plan is made once per distinct plan (making one checks
    and copies its tiles); check_call's dict is new every time, so editing it changes no
    later call."""
    dy, w, input_size, s, p, d = problem("fp16-1x1-p0")
    pt.conv2d_input(input_size, w, dy, s, p, d)
    made = pt._scope_of.cache_info().misses
    first = pt.conv2d_input(input_size, w, dy, s, p, d)
    assert pt._scope_of.cache_info().misses == made
    args = (list(dy.shape), list(w.shape), input_size, dy.dtype, list(s), four(p), list(d))
    values = pt.check_call(*args)
    assert values["vec_tile_shapes"] == pt.VEC_TILE and "convbp_tile_shapes" in values
    values["vec_tile_shapes"][0] = 3
    values["convbp_tile_shapes"][0].tileML1 = 3
    assert pt.check_call(*args)["vec_tile_shapes"] == pt.VEC_TILE
    assert torch.equal(bits(pt.conv2d_input(input_size, w, dy, s, p, d)), bits(first))


def _domain_cases():
    dy, w, size, *_ = make_problem(torch.bfloat16, 2, 8, 16, 9, 3, 1, 1)
    return {
        "groups 2": ("G1", (size, w[:, :4], dy), dict(padding=1, groups=2)),
        "padding same": ("T1", (size, w, dy), dict(padding="same")),
        "padding float": ("T1", (size, w, dy), dict(padding=1.5)),
        "padding of 4": ("R1", (size, w, dy), dict(padding=(1, 1, 1, 1))),
        "fp32": ("D1", (size, w.float(), dy.float()), dict(padding=1)),
        "fp64": ("D1", (size, w.double(), dy.double()), dict(padding=1)),
        "fp16 and bf16": ("D3", (size, w.half(), dy), dict(padding=1)),
        "unbatched 3-D": ("R1", (size[1:], w, dy[0]), dict(padding=1)),
        "conv3d": ("R1", (size + [3], w[..., None], dy[..., None]), dict(padding=1)),
        "stride 0": ("A1", (size, w, dy), dict(padding=1, stride=0)),
        "padding > kernel": ("A3", (size, w, dy), dict(padding=3)),
        "wrong input size": ("O1", ([2, 8, 12, 9], w, dy), dict(padding=1)),
        "wrong channels": ("C1", ([2, 9, 9, 9], w, dy), dict(padding=1)),
    }


@pytest.mark.parametrize("case", list(_domain_cases()))
def test_calls_outside_the_domain_raise_the_ops_rule_and_compute_nothing(case, kernel_calls):
    rule, args, kwargs = _domain_cases()[case]
    with pytest.raises(pypto.PyptoError) as info:
        pt.conv2d_input(*args, **kwargs)
    assert info.value.rule == rule, str(info.value)
    assert kernel_calls == []


def test_the_operator_refuses_asymmetric_padding_and_groups(kernel_calls):
    dy, w, size, *_ = make_problem(torch.bfloat16, 2, 8, 16, 9, 3, 1, 1)
    with pytest.raises(pypto.PyptoError) as info:
        OP(dy, [2, 8, 8, 9], w, [1, 1], [1, 0, 1, 1], [1, 1], 1)
    assert info.value.rule == "A4"
    with pytest.raises(pypto.PyptoError) as info:
        OP(dy, size, w[:, :4], [1, 1], [1, 1, 1, 1], [1, 1], 2)
    assert info.value.rule == "G1"
    # the fake (shape) implementation checks the same rules
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fdy, fw = mode.from_tensor(dy), mode.from_tensor(w)
        with pytest.raises(pypto.PyptoError) as info:
            OP(fdy, size, fw, [1, 1], [1, 0, 1, 1], [1, 1], 1)
        assert info.value.rule == "A4"
        assert list(OP(fdy, size, fw, [1, 1], [1, 1, 1, 1], [1, 1], 1).shape) == size
    assert kernel_calls == []


def test_the_operators_autograd_formula():
    """d/d grad_output and d/d weight of the dgrad, against torch's conv2d_input in float64."""
    for name in ("bf16-3x3-d2-p2", "fp16-3x3-s21-d12-p01"):
        dy, w, size, s, p, d = problem(name)
        g = torch.randn(size, generator=torch.Generator().manual_seed(1))
        dy1, w1 = dy.clone().requires_grad_(), w.clone().requires_grad_()
        out = OP(dy1, size, w1, list(s), four(p), list(d), 1)
        out.backward(g.to(dy.dtype))
        dy2, w2 = dy.double().requires_grad_(), w.double().requires_grad_()
        torch.nn.grad.conv2d_input(size, w2, dy2, s, p, d).backward(g.to(dy.dtype).double())
        for mine, ref in ((dy1.grad, dy2.grad), (w1.grad, w2.grad)):
            assert mine.dtype == dy.dtype
            # one fp32 computation, one rounding: within a few ulps of the float64 result
            tol = 2.0**-7 if dy.dtype == torch.bfloat16 else 2.0**-10
            assert torch.allclose(mine.double(), ref, rtol=2 * tol, atol=2 * tol * ref.abs().max())
    # and conv2d_input is differentiable in both, like torch's
    dy, w, size, s, p, d = problem("bf16-3x3-s1-p1")
    dy.requires_grad_(), w.requires_grad_()
    gdy, gw = torch.autograd.grad(pt.conv2d_input(size, w, dy, s, p, d).float().sum(), (dy, w))
    assert gdy.shape == dy.shape and gw.shape == w.shape


# --- torch.compile --------------------------------------------------------------------------------
def test_compile_fullgraph_gives_the_eager_bits():
    dy16, w16, size16, s16, p16, d16 = problem("fp16-3x3-s2-p1")
    dyb, wb, sizeb, sb, pb, db = problem("bf16-3x3-d2-p2")

    def both(dy16, w16, dyb, wb):
        a = pt.conv2d_input(size16, w16, dy16 * 2, s16, p16, d16)
        b = OP(dyb, sizeb, wb, list(sb), four(pb), list(db), 1)
        return a, b, a.float().sum() + b.float().sum()

    compiled = torch.compile(both, fullgraph=True)
    eager = both(dy16, w16, dyb, wb)
    got = compiled(dy16, w16, dyb, wb)
    assert torch.equal(bits(got[0]), bits(eager[0])) and torch.equal(bits(got[1]), bits(eager[1]))
    assert torch.allclose(got[2], eager[2])


def test_compile_training_step_with_pypto_conv2d_gives_the_eager_gradients():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 8, 12, 12, generator=gen).bfloat16()
    w1 = (torch.randn(16, 8, 3, 3, generator=gen) / 8).bfloat16()
    b1 = torch.randn(16, generator=gen).bfloat16()
    w2 = (torch.randn(16, 16, 1, 1, generator=gen) / 4).bfloat16()
    weights = torch.randn(2, 16, 6, 6, generator=gen)

    def step(x, w1, b1, w2):
        y = torch.relu(pt.conv2d(x, w1, b1, stride=2, padding=1))
        y = pt.conv2d(y, w2, None, 1, 0, 1)
        return (y.float() * weights).sum()

    def run(fn):
        leaves = [t.clone().requires_grad_() for t in (x, w1, b1, w2)]
        loss = fn(*leaves)
        loss.backward()
        return loss, [t.grad for t in leaves]

    loss_e, grads_e = run(step)
    loss_c, grads_c = run(torch.compile(step, fullgraph=True))
    for e, c in zip(grads_e, grads_c):
        assert torch.equal(bits(e), bits(c))
    assert torch.allclose(loss_e, loss_c)  # inductor sums the fp32 loss in its own order


def test_compile_refuses_a_call_outside_the_domain_when_tracing(kernel_calls):
    dy, w, size, *_ = make_problem(torch.bfloat16, 2, 8, 16, 9, 3, 1, 1)
    compiled = torch.compile(
        lambda dy, w: pt.conv2d_input(size, w, dy, 1, 1, groups=2), fullgraph=True
    )
    # dynamo wraps what the fake implementation raised; the op's error is in its text
    with pytest.raises(Exception) as info:
        compiled(dy, w[:, :4])
    assert "ConvBpValueError" in str(info.value) and "Invalid groups:2" in str(info.value)
    assert kernel_calls == []


# --- conv2d and Conv2d ----------------------------------------------------------------------------
def _leaves(*tensors):
    return [t.clone().requires_grad_() for t in tensors]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "conf",
    [
        dict(stride=2, padding=1),
        dict(padding=2, dilation=2),
        dict(padding="same"),
        dict(padding="valid", stride=(2, 1)),
        dict(padding=(0, 1), dilation=(2, 1)),
    ],
)
def test_conv2d_forward_by_torch_grad_input_by_pypto(dtype, conf):
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 8, 11, 10, generator=gen).to(dtype)
    w = (torch.randn(16, 8, 3, 3, generator=gen) / 8).to(dtype)
    b = torch.randn(16, generator=gen).to(dtype)
    x1, w1, b1 = _leaves(x, w, b)
    x2, w2, b2 = _leaves(x, w, b)
    y1 = pt.conv2d(x1, w1, b1, **conf)
    y2 = F.conv2d(x2, w2, b2, **conf)
    assert torch.equal(bits(y1), bits(y2))
    g = torch.randn(y1.shape, generator=gen).to(dtype)
    y1.backward(g)
    y2.backward(g)
    assert torch.equal(bits(w1.grad), bits(w2.grad)) and torch.equal(bits(b1.grad), bits(b2.grad))
    stride = conf.get("stride", 1)
    padding = conf.get("padding", 0)
    padding = {"same": 1, "valid": 0}.get(padding, padding) if isinstance(padding, str) else padding
    want = pt.conv2d_input(x.shape, w, g, stride, padding, conf.get("dilation", 1))
    assert torch.equal(bits(x1.grad), bits(want))
    judged = pypto.testing.compare(x2.grad, g, w, list(x.shape), *_conv_args(stride, padding, conf))
    if dtype == torch.bfloat16:  # torch's own, for the record: inside the bound
        assert judged.localisation.outside_count == 0


def _conv_args(stride, padding, conf):
    s = [stride, stride] if isinstance(stride, int) else list(stride)
    p = [padding, padding] if isinstance(padding, int) else list(padding)
    d = conf.get("dilation", 1)
    d = [d, d] if isinstance(d, int) else list(d)
    return s, four(p), d


def test_conv2d_refuses_at_the_forward_what_the_backward_could_not_do(kernel_calls):
    x = torch.randn(2, 8, 10, 10).bfloat16().requires_grad_()
    w = torch.randn(16, 8, 2, 2).bfloat16()
    with pytest.raises(pypto.PyptoError) as info:  # "same" with an even kernel: 0 + 1 padding
        pt.conv2d(x, w, padding="same")
    assert info.value.rule == "A4"
    with pytest.raises(pypto.PyptoError) as info:
        pt.conv2d(x, torch.randn(16, 4, 3, 3).bfloat16(), groups=2)
    assert info.value.rule == "G1"
    with pytest.raises(pypto.PyptoError) as info:
        pt.conv2d(x.float(), torch.randn(16, 8, 3, 3))
    assert info.value.rule == "D1"
    with pytest.raises(pypto.PyptoError) as info:
        pt.conv2d(x[0], torch.randn(16, 8, 3, 3).bfloat16())  # unbatched
    assert info.value.rule == "R1"
    # without a grad_input to compute, it is F.conv2d: any dtype, groups, padding
    with torch.no_grad():
        assert pt.conv2d(x, torch.randn(16, 4, 3, 3).bfloat16(), groups=2).shape == (2, 16, 8, 8)
    y = pt.conv2d(x.detach().float(), torch.randn(16, 8, 2, 2).requires_grad_(), padding="same")
    assert y.shape == (2, 16, 10, 10)
    y.sum().backward()  # grad_weight only: torch's
    assert kernel_calls == []


def test_Conv2d_module():
    torch.manual_seed(0)
    ref = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=True).bfloat16()
    mine = pt.Conv2d(8, 16, 3, stride=2, padding=1, bias=True).bfloat16()
    mine.load_state_dict(ref.state_dict())
    assert isinstance(mine, torch.nn.Conv2d)
    x = torch.randn(2, 8, 9, 9).bfloat16()
    x1, x2 = _leaves(x, x)
    y1, y2 = mine(x1), ref(x2)
    assert torch.equal(bits(y1), bits(y2))
    g = torch.randn_like(y1)
    y1.backward(g)
    y2.backward(g)
    assert torch.equal(bits(mine.weight.grad), bits(ref.weight.grad))
    assert torch.equal(bits(mine.bias.grad), bits(ref.bias.grad))
    assert torch.equal(bits(x1.grad), bits(pt.conv2d_input(x.shape, ref.weight, g, 2, 1)))
    # from_conv shares the parameters
    shared = pt.Conv2d.from_conv(ref)
    assert shared.weight is ref.weight and shared.bias is ref.bias
    assert torch.equal(bits(shared(x)), bits(ref(x)))
    # a padding mode other than zeros: torch pads, pypto's dgrad runs without padding
    refl = pt.Conv2d(8, 8, 3, padding=1, padding_mode="reflect", bias=False).bfloat16()
    base = torch.nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect", bias=False).bfloat16()
    base.load_state_dict(refl.state_dict())
    x1, x2 = _leaves(x, x)
    (refl(x1).float() ** 2).sum().backward()
    (base(x2).float() ** 2).sum().backward()
    # the two differ only by rounding
    assert torch.allclose(x1.grad.float(), x2.grad.float(), rtol=2**-6, atol=2**-6)
    # a grouped Conv2d is refused when trained
    grouped = pt.Conv2d(8, 8, 3, padding=1, groups=2).bfloat16()
    with pytest.raises(pypto.PyptoError) as info:
        grouped(x.clone().requires_grad_())
    assert info.value.rule == "G1"


def test_result_on_grad_outputs_device():
    """The meta device stands in for an accelerator (no accelerator here): the shape, dtype and
    device of the result follow grad_output's, and the rules are checked all the same."""
    dy, w, size, s, p, d = problem("bf16-3x3-s1-p1")
    out = pt.conv2d_input(size, w.to("meta"), dy.to("meta"), s, p, d)
    assert out.device.type == "meta" and list(out.shape) == size and out.dtype == dy.dtype
    with pytest.raises(pypto.PyptoError) as info:
        pt.conv2d_input(size, w.to("meta"), dy.to("meta"), s, p, d, groups=2)
    assert info.value.rule == "G1"
