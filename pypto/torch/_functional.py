"""``conv2d_input`` (torch.nn.grad.conv2d_input computed by pypto) and ``conv2d`` (F.conv2d
whose backward computes grad_input with pypto): torch's conventions in, the operator
``torch.ops.pypto.conv_backward_input`` underneath."""

import torch
import torch.nn.functional as F

from ..error import FeError
from ._autocast import cast_for_autocast
from ._convert import _four, _list, _pair
from ._op import conv_backward_input  # noqa: F401 - registers torch.ops.pypto's, called below
from ._plan import _run_plan, _tensor_plan


def conv2d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.grad.conv2d_input`` computed by pypto: the gradient of conv2d with respect to
    its input, [N, Cin, Hin, Win] = ``input_size``, with grad_output's dtype and device.

    stride, padding, dilation: an int or a pair (h, w), as torch takes them. Differentiable
    (``pypto::conv_backward_input``'s autograd formula) and traceable by torch.compile. Under
    ``torch.autocast`` fp32 tensors are cast to the autocast dtype first, as for the operator.

    Raises the op's PyptoError (``.rule``) for a call outside its domain: groups != 1, a dtype
    other than fp16 / bf16, tensors that are not 4-D, string padding, illegal sizes.
    """
    strides, paddings, dilations = (
        _pair(stride, "stride"),
        _four(padding),
        _pair(dilation, "dilation"),
    )
    input_size = _list(input_size)
    if isinstance(grad_output, torch.Tensor):  # the op's autocast rule, before its checks
        grad_output, weight = cast_for_autocast(grad_output.device.type, grad_output, weight)
    if not torch.compiler.is_compiling():  # compiled: the op's fake checks it when traced
        # the op's rules first: the operator's schema would refuse a str or a float with a
        # RuntimeError of its own, before the op could name the rule
        _tensor_plan(grad_output, input_size, weight, strides, paddings, dilations, groups)
    return torch.ops.pypto.conv_backward_input(
        grad_output, input_size, weight, strides, paddings, dilations, groups
    )


class _Conv2dFunction(torch.autograd.Function):
    """F.conv2d forward; backward: grad_input by pypto, grad_weight and grad_bias by torch."""

    @staticmethod
    def forward(x, w, b, stride, padding, dilation, groups):
        return F.conv2d(x, w, b, stride, padding, dilation, groups)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, w, b, stride, padding, dilation, groups = inputs
        ctx.save_for_backward(x, w)
        ctx.conf = (stride, padding, dilation, groups, None if b is None else list(b.shape))

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        stride, padding, dilation, groups, bias_sizes = ctx.conf
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_x = grad_w = grad_b = None
        if need_x:
            grad_x = torch.ops.pypto.conv_backward_input(
                grad,
                list(x.shape),
                w,
                list(stride),
                [padding[0], padding[0], padding[1], padding[1]],
                list(dilation),
                groups,
            )
        if need_w or need_b:
            _, grad_w, grad_b = torch.ops.aten.convolution_backward(
                grad,
                x,
                w,
                bias_sizes,
                list(stride),
                list(padding),
                list(dilation),
                False,
                [0, 0],
                groups,
                [False, need_w, need_b],
            )
        return grad_x, grad_w, grad_b, None, None, None, None


def _resolve_padding(padding, weight, stride, dilation):
    """torch's padding (int, pair, "valid", "same") as pypto's [top, bottom, left, right]."""
    if isinstance(padding, str):
        if padding == "valid":
            return [0, 0, 0, 0]
        if padding != "same":
            raise FeError(
                ValueError(
                    f"Invalid padding string {padding!r}, should be one of "
                    "'valid', 'same' (or an int or a pair)"
                )
            )
        if any(s != 1 for s in stride):
            raise FeError(ValueError("padding='same' is not supported for strided convolutions"))
        four = []
        for kernel, d in zip(weight.shape[2:], dilation):
            total = d * (kernel - 1)  # torch puts the odd one at the bottom / right
            four += [total // 2, total - total // 2]
        return four
    return _four(padding)


def conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv2d`` whose backward computes grad_input with pypto's dgrad
    (grad_weight and grad_bias with torch's ``aten.convolution_backward``).

    When grad_input will be needed (grad mode on, x requires grad) the call is checked against
    the op's domain before the forward runs: groups != 1, fp32 outside autocast, asymmetric
    padding (``"same"`` with an even kernel) and the like raise the op's PyptoError. Otherwise
    it is F.conv2d. Under ``torch.autocast`` it follows torch's policy for conv2d: x, w and b
    are cast to the autocast dtype (bf16 or fp16), and fp32 parameters get fp32 gradients.
    """
    if not (torch.is_grad_enabled() and isinstance(x, torch.Tensor) and x.requires_grad):
        return F.conv2d(x, w, b, stride, padding, dilation, groups)
    # torch.autocast: cast here, as aten.conv2d would, so that the backward sees what the
    # forward saw; the casts' own backward lands fp32 gradients in fp32 parameters
    x, w, b = cast_for_autocast(x.device.type, x, w, b)
    stride, dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
    four = _resolve_padding(padding, w, stride, dilation)
    if not torch.compiler.is_compiling():  # compiled: the op's fake checks it when traced
        if x.dim() == 4 and w.dim() == 4:
            out = _out_size(x.shape[2:], w.shape[2:], stride, four, dilation)
            if out is None:  # no output at all: torch's forward says why
                return F.conv2d(x, w, b, stride, padding, dilation, groups)
            dy_shape = [x.shape[0], w.shape[0], *out]
        else:  # not 2-D in NCHW: the op's rule R1
            dy_shape = list(x.shape)
        _run_plan(
            dy_shape, list(w.shape), list(x.shape), x.dtype, stride, four, dilation, groups, w.dtype
        )
    return _Conv2dFunction.apply(
        x, w, b, tuple(stride), (four[0], four[2]), tuple(dilation), groups
    )


def _out_size(size_in, kernel, stride, four, dilation):
    """The forward output size per axis (None where it would be < 1: the op's rules say why)."""
    out = []
    for axis in (0, 1):
        span = (
            size_in[axis]
            + four[2 * axis]
            + four[2 * axis + 1]
            - dilation[axis] * (kernel[axis] - 1)
            - 1
        )
        if (
            not all(isinstance(v, int) for v in (span, stride[axis]))
            or span < 0
            or stride[axis] < 1
        ):
            return None
        out.append(span // stride[axis] + 1)
    return out
