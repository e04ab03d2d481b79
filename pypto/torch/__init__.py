"""PyTorch integration: pypto's dgrad as a torch operator, a conv layer whose grad_input is
pypto's, and a cross-check of torch's own grad_input by CANN's accuracy standards.

``import pypto`` never imports torch; ``import pypto.torch`` does (ImportError without it).

conv2d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1)
    ``torch.nn.grad.conv2d_input``'s signature and conventions, computed by
    ``pypto.conv_backward_input`` (fp32 accumulation, one rounding).
conv_backward_input / torch.ops.pypto.conv_backward_input
    The custom operator ``pypto::conv_backward_input(grad_output, input_size, weight, strides,
    paddings, dilations, groups=1)`` with pypto's conventions (paddings [top, bottom, left,
    right]): a fake (shape) implementation for torch.compile and an autograd formula.
conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1) and Conv2d
    ``F.conv2d`` / ``nn.Conv2d`` whose backward computes grad_input with pypto (grad_weight and
    grad_bias by torch).
crosscheck(standard="dual-L0", report=None, on_fail="warn")
    A ``TorchFunctionMode`` that judges the grad_input of every convolution's backward
    (``aten.convolution_backward``, hooked on autograd's nodes as each backward starts) by
    ``pypto.testing.compare`` and keeps a table (``.rows``), written at exit as JSON or CSV.

Tiles: each call uses the L1/L0 tiles set with ``pypto.set_convbp_input_tile_shapes`` (or
``pypto.options``) when set, else the suggested ones; the vector tiles likewise, else
[16, 16, 16, 16]. A call outside the op's domain (groups != 1, fp32, not 2-D, string or
asymmetric padding, ...) raises the op's PyptoError, whose ``rule`` names the broken rule,
before anything is computed. Under torch.compile the fake implementation runs the same rules
when the graph is traced; dynamo wraps what it raises in its own TorchRuntimeError, whose text
names the PyptoError.
"""

# The modules, one job each (a comment, not the docstring: the API reference shows that):
# _convert     torch's dtypes, int-or-pair arguments and tensors as pypto's
# _plan        a call checked by the op's rules, the tiles it runs with; check_call
# _op          the custom operator and all its torch.library registrations
# _functional  conv2d_input, conv2d
# _layer       Conv2d
# _crosscheck  the crosscheck mode (a function mode hooking the backward's conv nodes)
# _graph       what it sees: the graph's conv nodes, the calls, the modules that ran them
# _report      its rows as a failure message, a table, JSON or CSV

try:  # first: a missing torch is named here, before a submodule needs it
    import torch  # noqa: F401
except ImportError:  # torch is optional for pypto, not for this package
    raise ImportError(
        "pypto.torch needs PyTorch, which is not installed: pip install torch "
        "(or pip install 'pypto[torch]')"
    ) from None

from ._crosscheck import CrosscheckError, CrosscheckWarning, crosscheck
from ._functional import conv2d, conv2d_input
from ._layer import Conv2d
from ._op import conv_backward_input  # importing it registers torch.ops.pypto's operator
from ._plan import (
    VEC_TILE,
    _scope_of,  # noqa: F401 - not public; the tests read its cache counters
    check_call,
)

__all__ = [
    "conv2d_input",
    "conv_backward_input",
    "conv2d",
    "Conv2d",
    "crosscheck",
    "CrosscheckError",
    "CrosscheckWarning",
    "check_call",
    "VEC_TILE",
]
