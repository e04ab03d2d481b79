"""The custom operator ``pypto::conv_backward_input`` and all its torch.library
registrations: the CPU computation, the fake (shape) implementation for torch.compile, the
autograd formula and the autocast kernels (``_autocast``). Registered once, when this module is
first imported (by ``pypto.torch``)."""

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .._convbp import conv_backward_input as _pypto_dgrad
from ..tensor import from_torch
from ._autocast import register_autocast_kernels
from ._convert import _from_array, _host, _list
from ._plan import _scope_of, _tensor_plan


def _compute(grad_output, input_size, weight, strides, paddings, dilations, groups):
    """pypto's dgrad of torch tensors: validated first, then computed on the host; the result
    has grad_output's dtype and device."""
    input_size = _list(input_size)
    plan = _tensor_plan(grad_output, input_size, weight, strides, paddings, dilations, groups)
    dy, w = from_torch(_host(grad_output)), from_torch(_host(weight))
    with _scope_of(*plan):
        out = _pypto_dgrad(dy, input_size, w, dy.dtype, strides, paddings, dilations, groups=groups)
    result = _from_array(out.numpy(), grad_output.dtype)
    return result if grad_output.device.type == "cpu" else result.to(grad_output.device)


@torch.library.custom_op("pypto::conv_backward_input", mutates_args=())
def conv_backward_input(
    grad_output: torch.Tensor,
    input_size: Sequence[int],
    weight: torch.Tensor,
    strides: Sequence[int],
    paddings: Sequence[int],
    dilations: Sequence[int],
    groups: int = 1,
) -> torch.Tensor:
    """pypto's dgrad as a torch operator, with pypto's conventions: paddings are [top, bottom,
    left, right]; the result has grad_output's dtype (fp16 / bf16) and device. Tiles: the
    caller's when set, else the suggested ones."""
    return _compute(
        grad_output, input_size, weight, list(strides), list(paddings), list(dilations), groups
    )


@conv_backward_input.register_fake
def _conv_backward_input_fake(
    grad_output, input_size, weight, strides, paddings, dilations, groups=1
):
    shapes = (*grad_output.shape, *weight.shape, *input_size)
    if all(type(v) is int for v in shapes):  # symbolic sizes are checked when the op runs
        _tensor_plan(
            grad_output,
            list(input_size),
            weight,
            list(strides),
            list(paddings),
            list(dilations),
            groups,
        )
    return grad_output.new_empty(list(input_size))


def _op_setup_context(ctx, inputs, output):
    grad_output, input_size, weight, strides, paddings, dilations, groups = inputs
    ctx.save_for_backward(grad_output, weight)
    ctx.conf = (list(strides), [paddings[0], paddings[2]], list(dilations), groups)


def _op_backward(ctx, grad):
    """dx = dgrad(dy, w) is linear in each: d/d dy is the forward convolution of the incoming
    gradient with w; d/d w is the weight gradient of that convolution with dy as its output
    gradient. Both at fp32, cast back."""
    grad_output, weight = ctx.saved_tensors
    strides, padding, dilations, groups = ctx.conf
    g = grad.float()
    grad_dy = grad_w = None
    if ctx.needs_input_grad[0]:
        grad_dy = F.conv2d(g, weight.float(), None, strides, padding, dilations, groups).to(
            grad_output.dtype
        )
    if ctx.needs_input_grad[2]:
        grad_w = torch.nn.grad.conv2d_weight(
            g, weight.shape, grad_output.float(), strides, padding, dilations, groups
        ).to(weight.dtype)
    return grad_dy, None, grad_w, None, None, None, None


conv_backward_input.register_autograd(_op_backward, setup_context=_op_setup_context)

# kept for the life of the process: a Library's registrations end when it is collected
_AUTOCAST_LIBRARY = torch.library.Library("pypto", "FRAGMENT")
register_autocast_kernels(
    _AUTOCAST_LIBRARY, "conv_backward_input", torch.ops.pypto.conv_backward_input.default
)
