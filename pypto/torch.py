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
    A ``TorchDispatchMode`` that judges the grad_input of every ``aten.convolution_backward``
    call by ``pypto.testing.compare`` and keeps a table (``.rows``), written at exit as JSON or
    CSV.

Tiles: each call uses the L1/L0 tiles set with ``pypto.set_convbp_input_tile_shapes`` (or
``pypto.options``) when set, else the suggested ones; the vector tiles likewise, else
[16, 16, 16, 16]. A call outside the op's domain (groups != 1, fp32, not 2-D, string or
asymmetric padding, ...) raises the op's PyptoError, whose ``rule`` names the broken rule,
before anything is computed. Under torch.compile the fake implementation runs the same rules
when the graph is traced; dynamo wraps what it raises in its own TorchRuntimeError, whose text
names the PyptoError.
"""

import contextlib
import functools
import os
import sys
import time
import warnings
from collections.abc import Sequence

try:
    import torch
except ImportError:  # torch is optional for pypto, not for this module
    raise ImportError(
        "pypto.torch needs PyTorch, which is not installed: pip install torch "
        "(or pip install 'pypto[torch]')"
    ) from None
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from . import testing as _testing
from ._convbp import conv_backward_input as _pypto_dgrad
from ._core import options as _config
from ._core.options import get_convbp_input_tile_shapes, get_vec_tile_shapes, options
from ._core.suggest import suggest_convbp_input_tile_shapes
from ._dtypes import DataType
from ._golden import calls as _calls
from ._golden.accuracy import json_ready
from ._version import __version__
from .error import ConvBpInputError, ConvBpValueError, FeError, PyptoError
from .tensor import Tensor, from_torch

try:  # torch's own class of data-less tensors (torch.compile's tracing); private, so guarded
    from torch._subclasses.fake_tensor import FakeTensor
except ImportError:  # pragma: no cover - every torch pypto supports has it

    class FakeTensor:  # isinstance() is then never true
        pass


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

VEC_TILE = [16, 16, 16, 16]  # the vector tiles used when the caller set none

# torch dtype -> pypto DataType, for shape-only validation (the op names the dtype it refuses)
_DTYPES = {
    torch.float16: DataType.DT_FP16,
    torch.bfloat16: DataType.DT_BF16,
    torch.float32: DataType.DT_FP32,
    torch.float64: DataType.DT_DOUBLE,
    torch.int8: DataType.DT_INT8,
    torch.int16: DataType.DT_INT16,
    torch.int32: DataType.DT_INT32,
    torch.int64: DataType.DT_INT64,
    torch.uint8: DataType.DT_UINT8,
    torch.bool: DataType.DT_BOOL,
}
for _name, _member in (
    ("float8_e4m3fn", DataType.DT_FP8E4M3),
    ("float8_e5m2", DataType.DT_FP8E5M2),
    ("float8_e8m0fnu", DataType.DT_FP8E8M0),
    ("uint16", DataType.DT_UINT16),
    ("uint32", DataType.DT_UINT32),
    ("uint64", DataType.DT_UINT64),
):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _member


def _datatype(dtype):
    """The pypto DataType of a torch dtype (DT_BOTTOM for one pypto has no name for: the op
    refuses it by rule D1 all the same)."""
    return _DTYPES.get(dtype, DataType.DT_BOTTOM)


_DTYPE_NAMES = {
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float32: "fp32",
    torch.float64: "fp64",
}


def _dtype_name(dtype):
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


# --- arguments: torch's conventions -> pypto's ----------------------------------------------------
def _pair(value, name):
    """torch's int-or-pair: an int (or anything not a sequence: the op's T1 names it) for both
    axes, or a sequence of two."""
    if isinstance(value, (list, tuple, torch.Size)):
        if len(value) != 2:
            raise ConvBpValueError(
                "R1",
                f"Input illegal {name} size:{len(value)}, which must be "
                f"2 for a 2-D convolution (an int or a pair (h, w)), "
                f"but got {tuple(value)!r}.",
            )
        return [value[0], value[1]]
    return [value, value]


def _four(padding):
    """torch's (h, w) padding -> pypto's [top, bottom, left, right]."""
    ph, pw = _pair(padding, "padding")
    return [ph, ph, pw, pw]


def _hashable(*args):
    try:
        hash(args)
    except TypeError:
        return None
    return args


@functools.lru_cache(maxsize=4096)
def _suggested(dy_shape, w_shape, input_size, dtype, strides, paddings, dilations):
    l1, l0 = suggest_convbp_input_tile_shapes(
        list(dy_shape),
        list(w_shape),
        list(input_size),
        dtype,
        list(strides),
        list(paddings),
        list(dilations),
    )
    return l1.as_tuple(), l0.as_tuple()  # plain tuples: the cache hands out nothing mutable


def _tiles_set():
    tile = _config._get("convbp_tile_shapes")  # read, not copied: nothing here mutates it
    return any(tile.tileL1Info.as_tuple()) or any(tile.tileL0Info.as_tuple())


def _run_plan(
    dy_shape, w_shape, input_size, dtype, strides, paddings, dilations, groups, w_dtype=None
):
    """(l1, l0, vec): the tiles this call runs with, after validating it by the op's rules on
    shape-only tensors (nothing is computed). l1, l0: the suggested tiles as tuples, or None
    where the caller's are set; vec: True where the caller set no vector tiles (VEC_TILE
    serves). Raises the op's PyptoError. ``_scope_of(*plan)`` is the scope to run it in.

    dtype: grad_output's DataType or torch dtype; w_dtype: the weight's, when it differs."""
    dtype, w_dtype = (_datatype(d) if isinstance(d, torch.dtype) else d for d in (dtype, w_dtype))
    if w_dtype is not None and w_dtype != dtype:  # the op's D1-D3 say which and why
        _validate(
            dy_shape, w_shape, input_size, dtype, strides, paddings, dilations, groups, w_dtype
        )
    vec = not get_vec_tile_shapes()
    l1 = l0 = None
    if not _tiles_set():
        key = _hashable(
            _tuple(dy_shape),
            _tuple(w_shape),
            _tuple(input_size),
            dtype,
            _tuple(strides),
            _tuple(paddings),
            _tuple(dilations),
        )
        try:
            l1, l0 = (
                _suggested(*key)
                if key is not None
                else _suggested.__wrapped__(
                    dy_shape, w_shape, input_size, dtype, strides, paddings, dilations
                )
            )
        except PyptoError as no_tiles:
            # the arguments break a rule (the op names the first, in its order, groups
            # included), or no tiles fit the problem (the suggestion's error)
            try:
                _validate(
                    dy_shape, w_shape, input_size, dtype, strides, paddings, dilations, groups
                )
            except ConvBpInputError as broken:
                if broken.rule != "TS0":  # TS0: the arguments are fine, the tiles are unset
                    raise broken from None
            raise no_tiles from None
    with _scope_of(l1, l0, vec):
        _validate(dy_shape, w_shape, input_size, dtype, strides, paddings, dilations, groups)
    return l1, l0, vec


@functools.lru_cache(maxsize=4096)
def _scope_of(l1, l0, vec):
    """The ``pypto.options`` scope of a run plan (``_run_plan``), made once per distinct plan:
    making one checks and copies its tiles (several microseconds of a small call)."""
    return options(**_plan_values(l1, l0, vec))


def _plan_values(l1, l0, vec):
    """A run plan's options as a new dict: what check_call returns and _scope_of sets."""
    from .pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info

    values = {}
    if vec:
        values["vec_tile_shapes"] = list(VEC_TILE)
    if l1 is not None:
        values["convbp_tile_shapes"] = (ConvBpTileL1Info(*l1), ConvBpTileL0Info(*l0))
    return values


def _tuple(value):
    return tuple(value) if isinstance(value, (list, tuple, torch.Size)) else value


def _validate(
    dy_shape, w_shape, input_size, dtype, strides, paddings, dilations, groups, w_dtype=None
):
    """Every rule of the op, in its order, on shape-only tensors: nothing is computed."""
    _pypto_dgrad(
        Tensor(list(dy_shape), dtype),
        _list(input_size),
        Tensor(list(w_shape), dtype if w_dtype is None else w_dtype),
        dtype,
        _list(strides),
        _list(paddings),
        _list(dilations),
        groups=groups,
    )


def _list(value):
    return list(value) if isinstance(value, (tuple, torch.Size)) else value


def check_call(
    grad_output_shape,
    weight_shape,
    input_size,
    dtype,
    strides,
    paddings,
    dilations,
    groups=1,
    weight_dtype=None,
):
    """Validate a dgrad by the op's rules without computing it; return the options (tiles,
    vector tiles) it would run with (empty where the caller's are in effect).

    ``dtype`` (and ``weight_dtype`` when it differs) is a torch dtype or a pypto DataType;
    strides, paddings (pypto's [top, bottom, left, right]) and dilations as for
    ``pypto.conv_backward_input``. Raises the op's PyptoError (``.rule`` names the broken
    rule)."""
    return _plan_values(
        *_run_plan(
            list(grad_output_shape),
            list(weight_shape),
            input_size,
            dtype,
            strides,
            paddings,
            dilations,
            groups,
            weight_dtype,
        )
    )


def _host(t):
    """A CPU tensor holding ``t``'s values, with nothing lazy (negation, conjugation)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.resolve_neg().resolve_conj()


def _without_data(*tensors):
    """Why a call's tensors cannot be read (a meta or fake tensor: shapes only), or None."""
    for t in tensors:
        if t.device.type == "meta":
            return "a tensor on the meta device"
        if isinstance(t, FakeTensor):
            return "a fake tensor (FakeTensorMode)"
    return None


def _from_array(array, dtype):
    """A torch tensor on ``array`` (pypto's result: fresh memory, fp16 or bf16)."""
    if dtype == torch.bfloat16:
        return torch.from_numpy(array.view("int16")).view(torch.bfloat16)
    return torch.from_numpy(array)


def _compute(grad_output, input_size, weight, strides, paddings, dilations, groups):
    """pypto's dgrad of torch tensors: validated first, then computed on the host; the result
    has grad_output's dtype and device."""
    for name, value in (("grad_output", grad_output), ("weight", weight)):
        if not isinstance(value, torch.Tensor):
            raise FeError(
                TypeError(f"{name} must be a torch.Tensor, but got {type(value).__name__}")
            )
    input_size = _list(input_size)
    plan = _run_plan(
        list(grad_output.shape),
        list(weight.shape),
        input_size,
        grad_output.dtype,
        strides,
        paddings,
        dilations,
        groups,
        weight.dtype,
    )
    dy, w = from_torch(_host(grad_output)), from_torch(_host(weight))
    with _scope_of(*plan):
        out = _pypto_dgrad(dy, input_size, w, dy.dtype, strides, paddings, dilations, groups=groups)
    result = _from_array(out.numpy(), grad_output.dtype)
    return result if grad_output.device.type == "cpu" else result.to(grad_output.device)


# --- the custom operator --------------------------------------------------------------------------
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
        _run_plan(
            list(grad_output.shape),
            list(weight.shape),
            list(input_size),
            grad_output.dtype,
            list(strides),
            list(paddings),
            list(dilations),
            groups,
            weight.dtype,
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


def conv2d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.grad.conv2d_input`` computed by pypto: the gradient of conv2d with respect to
    its input, [N, Cin, Hin, Win] = ``input_size``, with grad_output's dtype and device.

    stride, padding, dilation: an int or a pair (h, w), as torch takes them. Differentiable
    (``pypto::conv_backward_input``'s autograd formula) and traceable by torch.compile.

    Raises the op's PyptoError (``.rule``) for a call outside its domain: groups != 1, a dtype
    other than fp16 / bf16, tensors that are not 4-D, string padding, illegal sizes.
    """
    strides, paddings, dilations = (
        _pair(stride, "stride"),
        _four(padding),
        _pair(dilation, "dilation"),
    )
    input_size = _list(input_size)
    if not torch.compiler.is_compiling():  # compiled: the op's fake checks it when traced
        # the op's rules first: the operator's schema would refuse a str or a float with a
        # RuntimeError of its own, before the op could name the rule
        for name, value in (("grad_output", grad_output), ("weight", weight)):
            if not isinstance(value, torch.Tensor):
                raise FeError(
                    TypeError(f"{name} must be a torch.Tensor, but got {type(value).__name__}")
                )
        _run_plan(
            list(grad_output.shape),
            list(weight.shape),
            input_size,
            grad_output.dtype,
            strides,
            paddings,
            dilations,
            groups,
            weight.dtype,
        )
    return torch.ops.pypto.conv_backward_input(
        grad_output, input_size, weight, strides, paddings, dilations, groups
    )


# --- conv2d and Conv2d: torch's forward, pypto's grad_input ---------------------------------------
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
    the op's domain before the forward runs: groups != 1, fp32, asymmetric padding (``"same"``
    with an even kernel) and the like raise the op's PyptoError. Otherwise it is F.conv2d.
    """
    if not (torch.is_grad_enabled() and isinstance(x, torch.Tensor) and x.requires_grad):
        return F.conv2d(x, w, b, stride, padding, dilation, groups)
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


class Conv2d(torch.nn.Conv2d):
    """``torch.nn.Conv2d`` whose backward computes grad_input with pypto (see :func:`conv2d`).
    Same arguments, parameters and state dict as nn.Conv2d; non-zero padding modes pad with
    ``F.pad`` (differentiated by torch) and convolve without padding."""

    def _conv_forward(self, input, weight, bias):
        if self.padding_mode != "zeros":
            return conv2d(
                F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode),
                weight,
                bias,
                self.stride,
                0,
                self.dilation,
                self.groups,
            )
        return conv2d(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    @classmethod
    def from_conv(cls, conv):
        """A pypto Conv2d with ``conv``'s (an nn.Conv2d's) configuration, sharing its
        parameters."""
        with torch.device("meta"):  # nothing allocated or initialised: replaced below
            new = cls(
                conv.in_channels,
                conv.out_channels,
                conv.kernel_size,
                conv.stride,
                conv.padding,
                conv.dilation,
                conv.groups,
                conv.bias is not None,
                conv.padding_mode,
            )
        new.weight = conv.weight
        new.bias = conv.bias
        new.train(conv.training)
        return new


# --- crosscheck -----------------------------------------------------------------------------------
class CrosscheckError(AssertionError):
    """A grad_input that failed the standard under ``crosscheck(on_fail="raise")``; ``row`` is
    its table row and ``result`` the ``pypto.testing.CompareResult``."""

    def __init__(self, message, row, result):
        super().__init__(message)
        self.row, self.result = row, result


class CrosscheckWarning(UserWarning):
    """A grad_input that failed the standard under ``crosscheck(on_fail="warn")``."""


_ON_FAIL = ("warn", "raise", "ignore")


_CONV_BACKWARD = torch.ops.aten.convolution_backward.default
_ARG_NAMES = [a.name for a in _CONV_BACKWARD._schema.arguments]


_BLAS = []  # threadpoolctl's controller of NumPy's BLAS, made on first use (or False)


@contextlib.contextmanager
def _judging_threads(threads):
    """pypto's threads and, with threadpoolctl, the BLAS threads at ``threads`` (None: as set)."""
    if threads is None:
        yield
        return
    if not _BLAS:
        try:
            from threadpoolctl import ThreadpoolController

            _BLAS.append(ThreadpoolController().select(user_api="blas"))
        except Exception:  # not installed, or a library it cannot read: pypto's threads only
            _BLAS.append(False)
    blas = _BLAS[0].limit(limits=threads) if _BLAS[0] else contextlib.nullcontext()
    with options(num_threads=threads), blas:
        yield


class crosscheck(TorchDispatchMode):
    """Judge torch's own grad_input of every ``aten.convolution_backward`` call by CANN's
    accuracy standards, against pypto's float64 golden (``pypto.testing.compare``).

    >>> with pypto.torch.crosscheck(standard="dual-L0", report="xcheck.json") as xc:
    ...     loss = model(x).float().sum(); loss.backward()
    >>> xc.rows      # one dict per call: verdicts, max ulp, elements outside the bound, ...

    torch computes every call unchanged; the mode only reads the results. A call inside pypto's
    domain (grad_input asked for, fp16 / bf16, 2-D, groups 1, symmetric padding, ...) is judged
    by ``standard`` (one of ``pypto.testing.STANDARDS`` or "all"); every standard's verdict is
    kept. Others are listed as skipped, with the op's rule and message (or why else).

    threads: the threads that judge (pypto's own result, NumPy's BLAS for the float64 golden
    when threadpoolctl is installed); None leaves both as set. 1 by default: the judging runs
    between torch's operators, whose OpenMP threads are still spinning, and more threads than
    cores slow both (on 2 cores a ResNet-18-like bf16 step under crosscheck took 0.26 s with 1,
    0.56 to 2.1 s with the defaults).

    on_fail: "warn" (a CrosscheckWarning per failing call), "raise" (CrosscheckError at the first
    failing call, after recording it) or "ignore". report: a path written at exit (also on an
    exception), CSV when it ends with .csv, else JSON; None: no file.

    failures maps each failing call's index to its CompareResult (``print(xc.failures[i])``
    for the whole report), for the first ``keep_failures`` failing calls, and to None for later
    ones: a result holds about 80 bytes per grad_input element (the float64 golden, the
    localisation's error arrays, copies of both results), so a training loop under the mode
    keeps at most that many. Every call, failing or not, keeps its row in ``rows`` (verdicts,
    max ulp, failing tasks). 0 keeps no result.

    Calls whose tensors hold no data (the meta device, fake tensors) are listed as skipped.
    """

    def __init__(
        self,
        standard=_testing.DEFAULT_STANDARD,
        report=None,
        on_fail="warn",
        top=5,
        threads=1,
        keep_failures=4,
    ):
        super().__init__()
        if threads is not None:
            options(num_threads=threads)  # checks it, as the op's option: int in [1, 1024]
        _testing._check_standard(standard)
        if not (isinstance(on_fail, str) and on_fail in _ON_FAIL):
            raise FeError(
                ValueError(f"on_fail must be one of {', '.join(_ON_FAIL)}, but got {on_fail!r}")
            )
        if report is not None:
            if not isinstance(report, (str, os.PathLike)):
                raise FeError(
                    TypeError(
                        f"report must be a path (str or os.PathLike) or None, "
                        f"but got {type(report).__name__}"
                    )
                )
            report = os.fspath(report)
            folder = os.path.dirname(os.path.abspath(report))
            if not os.path.isdir(folder):
                raise FeError(ValueError(f"report: the folder {folder} does not exist"))
        self.standard, self.report, self.on_fail = standard, report, on_fail
        self.top = _testing._top(top)
        self.threads = threads
        self.keep_failures = _testing._count(keep_failures, "keep_failures")
        self.rows = []
        self.failures = {}
        self._kept_failures = 0
        self._calls = 0

    # --- the mode ---------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is _CONV_BACKWARD:
            self._judge(args, kwargs, out)
        return out

    def __exit__(self, exc_type, exc_value, traceback):
        try:
            return super().__exit__(exc_type, exc_value, traceback)
        finally:
            if self.report is not None:
                self.write(self.report)

    # --- one call ---------------------------------------------------------------------------
    def _judge(self, args, kwargs, out):
        a = dict(zip(_ARG_NAMES, args))
        a.update(kwargs)
        index = self._calls
        self._calls += 1
        dy, x, w = a["grad_output"], a["input"], a["weight"]
        stride, padding, dilation = list(a["stride"]), list(a["padding"]), list(a["dilation"])
        groups, mask = a["groups"], list(a["output_mask"])
        paddings = (
            [padding[0], padding[0], padding[1], padding[1]] if len(padding) == 2 else padding
        )
        row = _calls.new_row(
            {"call": index, "status": "skipped", "rule": None},
            {"seconds": None},
            dtype=_dtype_name(dy.dtype),
            grad_output=list(dy.shape),
            weight=list(w.shape),
            grad_input=list(x.shape),
            strides=stride,
            paddings=paddings,
            dilations=dilation,
            groups=groups,
            standard=self.standard,
            elements=x.numel(),
        )
        self.rows.append(row)
        if not mask[0]:
            row["reason"] = "grad_input not asked for (output_mask[0] is False)"
            return
        if a["transposed"]:
            row["reason"] = (
                "transposed convolution: its grad_input is a forward convolution, not a dgrad"
            )
            return
        if any(a["output_padding"]):
            row["reason"] = f"output_padding {list(a['output_padding'])} (transposed only)"
            return
        empty = _without_data(out[0], dy, w)
        if empty is not None:
            row["reason"] = f"{empty}: no data to judge"
            return
        start = time.perf_counter()
        try:
            plan = _run_plan(
                list(dy.shape),
                list(w.shape),
                list(x.shape),
                dy.dtype,
                stride,
                paddings,
                dilation,
                groups,
                w.dtype,
            )
            with _scope_of(*plan):
                l1, l0 = get_convbp_input_tile_shapes()
                tiles = (l1, l0, get_vec_tile_shapes())
            with _judging_threads(self.threads):
                result = _testing.compare(
                    _host(out[0]),
                    _host(dy),
                    _host(w),
                    list(x.shape),
                    stride,
                    paddings,
                    dilation,
                    tiles=tiles,
                    standard=self.standard,
                )
        except PyptoError as exc:
            row["rule"] = getattr(exc, "rule", None)
            row["reason"] = str(exc)
            return
        row["seconds"] = round(time.perf_counter() - start, 6)
        row.update(_calls.judged(result))
        if result.passed:
            return
        # every failing call is listed; only the first keep_failures keep their whole result
        kept = self._kept_failures < self.keep_failures
        self.failures[index] = result if kept else None
        self._kept_failures += kept
        text = self._failure_text(row)
        if self.on_fail == "raise":
            raise CrosscheckError(text + "\n" + result.report(self.top), row, result)
        if self.on_fail == "warn":
            # a registry of its own: Python's default filter shows a warning once per text and
            # place, and the same call of a later step or crosscheck fails with the same text
            line = sys._getframe().f_lineno + 1
            warnings.warn_explicit(text, CrosscheckWarning, __file__, line, __name__, {})

    def _failure_text(self, row):
        tasks = "; ".join(
            f"image {t['image']} channels {t['channels'][0]}-{t['channels'][1]} rows "
            f"{t['rows'][0]}-{t['rows'][1]}: {t['outside']} of {t['elements']}"
            for t in row["failing_tasks"][:5]
        )
        more = len(row["failing_tasks"]) - 5
        tasks += f"; and {more} more" if more > 0 else ""
        failed = _calls.failing_standards(row)
        return (
            f"pypto crosscheck: convolution_backward call {row['call']} (grad_output "
            f"{_calls.shape_text(row['grad_output'])}, weight {_calls.shape_text(row['weight'])}, "
            f"strides {row['strides']}, paddings {row['paddings']}, dilations "
            f"{row['dilations']}, {row['dtype']}): torch's grad_input fails "
            f"{self.standard}; max {row['max_ulp']:.3g} ulp, {row['outside_bound']} of "
            f"{row['elements']} elements outside the fp32-accumulation bound; failing "
            f"standards: {', '.join(failed)}; tasks: {tasks or 'none'}"
        )

    # --- the table --------------------------------------------------------------------------
    def summary(self):
        """{"calls", "judged", "passed", "failed", "skipped"} counts."""
        return _calls.counts(self.rows)

    def as_dict(self):
        return json_ready(
            {
                "pypto_version": __version__,
                "torch_version": torch.__version__,
                "standard": self.standard,
                "on_fail": self.on_fail,
                "summary": self.summary(),
                "rows": [_calls.json_row(r) for r in self.rows],
            }
        )

    def write(self, path):
        """Write the table to ``path``: CSV when it ends with .csv, else JSON."""
        path = os.fspath(path)
        if path.lower().endswith(".csv"):
            _calls.write_csv(
                path,
                self.rows,
                ("call", "status", "rule"),
                trailing=("seconds",),
                verdict_prefix="verdict_",
                int_list=_calls.spaced,
            )
        else:
            _calls.write_json(path, self.as_dict())
        return path

    def table(self):
        """The rows as text, one line per call."""
        lines = [
            f"{'call':>4}  {'status':<7} {'grad_output':<14} {'weight':<14} "
            f"{'s':<5} {'p':<5} {'d':<5} {'dtype':<5} {'max ulp':>8} {'outside':>8}  note"
        ]
        for r in self.rows:
            ulp = "" if r["max_ulp"] is None else f"{r['max_ulp']:.3g}"
            outside = "" if r["outside_bound"] is None else str(r["outside_bound"])
            note = r["reason"] or ""
            if r["rule"]:
                note = f"rule {r['rule']}"
            if r["status"] == "fail":
                note = f"{len(r['failing_tasks'])} failing task(s)"
            lines.append(
                f"{r['call']:>4}  {r['status']:<7} {_calls.shape_text(r['grad_output']):<14} "
                f"{_calls.shape_text(r['weight']):<14} "
                f"{','.join(map(str, r['strides'])):<5} "
                f"{','.join(map(str, r['paddings'][::2])):<5} "
                f"{','.join(map(str, r['dilations'])):<5} {r['dtype']:<5} "
                f"{ulp:>8} {outside:>8}  {note[:60]}"
            )
        s = self.summary()
        lines.append(
            f"{s['calls']} call(s): {s['judged']} judged ({s['passed']} pass, "
            f"{s['failed']} fail), {s['skipped']} skipped"
        )
        return "\n".join(lines)

    def __str__(self):
        return self.table()
