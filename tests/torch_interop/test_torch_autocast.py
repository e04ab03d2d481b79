"""pypto.torch under torch.autocast: the operator, conv2d_input, conv2d and Conv2d follow
torch's policy for convolutions (fp32 inputs cast to the autocast dtype, fp32 gradients in fp32
parameters), eager and compiled; outside autocast an fp32 call is refused with a message that
names autocast. The training test checks every number against nn.Conv2d and a float64 oracle."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: pypto.torch needs it")
if getattr(torch, "__file__", None) is None:  # tests/torch_interop seen as a namespace package
    pytest.skip("PyTorch is not installed: pypto.torch needs it", allow_module_level=True)

import pypto.torch as pt  # noqa: E402
from pypto.error import ConvBpValueError  # noqa: E402
from support.numerics import check_against  # noqa: E402
from support.reference import dgrad_abs_reference, dgrad_reference, ulp  # noqa: E402

F = torch.nn.functional
OP = torch.ops.pypto.conv_backward_input
LOW = {"bf16": torch.bfloat16, "fp16": torch.float16}
U32 = 2.0**-24  # fp32's unit roundoff: the accumulation both kernels promise


def _problem(seed=0):
    g = torch.Generator().manual_seed(seed)
    dy = torch.randn(2, 16, 7, 7, generator=g)
    w = torch.randn(16, 8, 3, 3, generator=g) / 12
    return dy, w, [2, 8, 7, 7], [1, 1], [1, 1, 1, 1], [1, 1]


@pytest.mark.parametrize("low", ["bf16", "fp16"])
def test_the_operator_casts_fp32_inputs_to_the_autocast_dtype(low):
    dy, w, size, s, p, d = _problem()
    with torch.autocast("cpu", dtype=LOW[low]):
        under = OP(dy, size, w, s, p, d, 1)
        already = OP(dy.to(LOW[low]), size, w.to(LOW[low]), s, p, d, 1)  # nothing to cast
    by_hand = OP(dy.to(LOW[low]), size, w.to(LOW[low]), s, p, d, 1)
    assert under.dtype == LOW[low]
    assert torch.equal(under.view(torch.int16), by_hand.view(torch.int16))
    assert torch.equal(already.view(torch.int16), by_hand.view(torch.int16))


def test_float64_is_not_cast_and_is_refused_as_before():
    """autocast leaves float64 alone (as for aten.conv2d): the op's rule D1 refuses it."""
    dy, w, size, s, p, d = _problem()
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(ConvBpValueError) as info:
        OP(dy.double(), size, w.double(), s, p, d, 1)
    assert info.value.rule == "D1"


@pytest.mark.parametrize(
    "call",
    [
        lambda dy, w, size, s, p, d: OP(dy, size, w, s, p, d, 1),
        lambda dy, w, size, s, p, d: pt.conv2d_input(size, w, dy, 1, 1),
        lambda dy, w, size, s, p, d: pt.conv2d(
            torch.randn(size, requires_grad=True), w.transpose(0, 1), padding=1
        ),
    ],
    ids=["operator", "conv2d_input", "conv2d"],
)
def test_fp32_outside_autocast_is_refused_with_autocast_named(call):
    dy, w, size, s, p, d = _problem()
    with pytest.raises(ConvBpValueError) as info:
        call(dy, w, size, s, p, d)
    assert info.value.rule == "D1"
    text = str(info.value)
    assert "must in [bf16, fp16]" in text  # upstream's text, then the way in
    assert "torch.autocast(" in text and "torch.bfloat16" in text


@pytest.mark.parametrize("low", ["bf16", "fp16"])
def test_conv2d_input_follows_autocast(low):
    dy, w, size, s, p, d = _problem(1)
    with torch.autocast("cpu", dtype=LOW[low]):
        got = pt.conv2d_input(size, w, dy, 1, 1)
    want = pt.conv2d_input(size, w.to(LOW[low]), dy.to(LOW[low]), 1, 1)
    assert got.dtype == LOW[low]
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


class _Net(torch.nn.Module):
    """conv (3 -> 16) -> ReLU -> conv (16 -> 8, stride 2): pypto computes the second conv's dx
    (the first one's input needs no gradient). Hooks keep dy and dx of the second conv."""

    def __init__(self, conv):
        super().__init__()
        self.c1 = conv(3, 16, 3, padding=1)
        self.c2 = conv(16, 8, 3, stride=2, padding=1)
        self.kept = {}

    def forward(self, x):
        h = F.relu(self.c1(x))
        h.register_hook(lambda g: self.kept.__setitem__("dx2", g))
        out = self.c2(h)
        out.register_hook(lambda g: self.kept.__setitem__("dy2", g))
        return out


def _wgrad64(x, dy, stride, pad):
    """float64 weight gradient of a 3x3 conv: sum over n, ho, wo of dy * the input window."""
    n, cin, h, w = x.shape
    xp = np.zeros((n, cin, h + 2 * pad, w + 2 * pad))
    xp[:, :, pad : pad + h, pad : pad + w] = x
    ho, wo = dy.shape[2:]
    out = np.zeros((dy.shape[1], cin, 3, 3))
    for kh in range(3):
        for kw in range(3):
            window = xp[:, :, kh : kh + stride * ho : stride, kw : kw + stride * wo : stride]
            out[:, :, kh, kw] = np.einsum("nchw,nkhw->kc", window, dy)
    return out


def _f64(t):
    return t.detach().double().numpy()


@pytest.mark.parametrize("low", ["bf16", "fp16"])
def test_training_under_autocast_agrees_with_nn_conv2d(low):
    """The usual mixed-precision recipe: fp32 parameters and inputs, torch.autocast around the
    forward, SGD (and for fp16 torch.amp.GradScaler). nn.Conv2d trains; at each of its steps a
    pypto.torch.Conv2d model with the same weights runs the same step. Per step: the losses
    are the same bits (same forward); every gradient is fp32 in an fp32 parameter; pypto's dx
    is within the op's bound of the float64 oracle of the dy and w it was given; the second
    conv's gradients are the same bits (they do not depend on dx); the first conv's differ by
    no more than their linear response to the measured dx difference plus fp32 accumulation
    and one rounding to the autocast dtype in each model."""
    dtype = LOW[low]
    torch.manual_seed(0)
    ref, ours = _Net(torch.nn.Conv2d), _Net(pt.Conv2d)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    ours_opt = torch.optim.SGD(ours.parameters(), lr=0.1)  # its step is undone by the reload
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, enabled=low == "fp16")
    ours_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, enabled=low == "fp16")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 3, 12, 12, generator=g)
    target = torch.randn(4, 8, 6, 6, generator=g)
    for step in range(3):
        ours.load_state_dict(ref.state_dict())
        losses, grads = [], []
        for model, scale in ((ref, scaler), (ours, ours_scaler)):
            model.zero_grad()
            with torch.autocast("cpu", dtype=dtype):
                loss = F.mse_loss(model(x).float(), target)
            scale.scale(loss).backward()
            losses.append(loss.detach())
            grads.append(
                {n: p.grad.detach() / scale.get_scale() for n, p in model.named_parameters()}
            )
        assert torch.equal(losses[0], losses[1]), step
        for name, p in ours.named_parameters():
            assert p.dtype == torch.float32 and p.grad.dtype == torch.float32, name
            assert torch.isfinite(p.grad).all(), name
        for name in ("c2.weight", "c2.bias"):
            assert torch.equal(grads[0][name], grads[1][name]), (step, name)

        # pypto's dx against the oracle of the dy and w it was given
        dy2 = ours.kept["dy2"]
        assert dy2.dtype == dtype and torch.equal(dy2, ref.kept["dy2"])
        w2 = ours.c2.weight.detach().to(dtype)
        dx2 = ours.kept["dx2"]
        assert dx2.dtype == dtype
        args = ((12, 12), (2, 2), (1, 1), (1, 1))
        np_low = np.float16 if low == "fp16" else __import__("ml_dtypes").bfloat16
        check_against(
            _f64(dx2).astype(np_low),
            dgrad_reference(_f64(dy2), _f64(w2), *args),
            dgrad_abs_reference(_f64(dy2), _f64(w2), *args),
            16 * 9,
            f"{low} step {step} dx",
        )

        # the first conv's gradients: the response to the dx difference, plus each model's own
        # accumulation (fp32, K = N*H*W terms) and rounding to the autocast dtype
        mask = _f64(_relu_input(ours, x, dtype)) > 0  # where ReLU passes the gradient
        delta = np.abs(_f64(dx2) - _f64(ref.kept["dx2"])) * mask
        da1 = np.abs(_f64(dx2)) * mask
        x_low = np.abs(_f64(x.to(dtype)))
        k = 4 * 12 * 12
        scale = ours_scaler.get_scale()
        either = da1 + delta  # bounds |da1| of both models
        for name, response, size in (
            ("c1.weight", _wgrad64(x_low, delta, 1, 1), _wgrad64(x_low, either, 1, 1)),
            ("c1.bias", delta.sum(axis=(0, 2, 3)), either.sum(axis=(0, 2, 3))),
        ):
            a, b = _f64(grads[0][name]), _f64(grads[1][name])
            rounding = ulp(np.maximum(np.abs(a), np.abs(b)) * scale, low) / scale
            bound = response + 2 * k * U32 * size + rounding
            excess = float(np.max(np.abs(a - b) - bound))
            assert excess <= 0, (step, name, excess)

        scaler.step(opt)
        scaler.update()
        ours_scaler.step(ours_opt)
        ours_scaler.update()
    assert losses[0] < 10  # trained without blowing up (the numbers above are the test)


def _relu_input(model, x, dtype):
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        return model.c1(x)


def test_compiled_training_step_under_autocast_gives_the_eager_bits():
    torch.manual_seed(0)
    eager, compiled = _Net(pt.Conv2d), _Net(pt.Conv2d)
    compiled.load_state_dict(eager.state_dict())
    x = torch.randn(2, 3, 12, 12)

    def step(model):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x).float().pow(2).sum().backward()
        return [p.grad for p in model.parameters()]

    want = step(eager)
    got = step(torch.compile(compiled, fullgraph=False))
    assert all(torch.equal(a, b) for a, b in zip(want, got))
