"""pypto.conv_backward_input and its shape-range companion: validate, then dispatch."""

import warnings

from ._core.rules import size_range_args, validate_conv_backward_input
from ._core.shapes import clipped_bounds
from .device import AclError, disable_after_error, get_device, select_backend
from .error import ConvBpValueError, FeError, argument_errors_are_pypto_errors
from .tensor import Tensor

__all__ = ["conv_backward_input", "conv_backward_input_size_range"]


@argument_errors_are_pypto_errors
def conv_backward_input(
    grad_output, input_size, weight, out_dtype, strides, paddings, dilations, *, groups=1
):
    """Gradient of a 2-D convolution with respect to its input (dgrad, "dx").

    Parameters
    ----------
    grad_output : pypto.Tensor
        dy, NCHW ``[N, Cout, Hout, Wout]``, DT_FP16 or DT_BF16.
    input_size : list or tuple of 4 int
        ``[N, Cin, Hin, Win]``, the shape of the result; Hin and Win must lie in the range that
        :func:`conv_backward_input_size_range` returns.
    weight : pypto.Tensor
        ``[Cout, Cin, Kh, Kw]``, same dtype as grad_output.
    out_dtype : pypto.DataType
        Equal to grad_output's dtype.
    strides : [sh, sw]
    paddings : [top, bottom, left, right] (top == bottom, left == right)
    dilations : [dh, dw]
    groups : int, keyword-only
        Only 1.

    Returns
    -------
    pypto.Tensor
        ``input_size``-shaped, ``out_dtype``. When grad_output and weight hold host data the
        values are computed (fp32 accumulation, one round-to-nearest-even rounding); when both
        are shape-only tensors the result is shape-only too.

    Raises
    ------
    pypto.error.ConvBpInputError
        The first broken rule of the specification (``.rule`` holds its id), before anything
        is computed. Tile shapes (``set_convbp_input_tile_shapes``) and vector tile shapes
        (``set_vec_tile_shapes``) must be set first.
    """
    call = validate_conv_backward_input(
        grad_output, input_size, weight, out_dtype, strides, paddings, dilations, groups
    )
    if grad_output.has_data != weight.has_data:
        holder, other = (
            ("grad_output", "weight") if grad_output.has_data else ("weight", "grad_output")
        )
        raise FeError(
            ValueError(
                f"{holder} holds data but {other} only describes a shape: pass "
                "both with data (pypto.from_numpy / from_torch) or neither."
            )
        )
    if not grad_output.has_data:
        p = call.problem
        return Tensor([p.n, p.cin, p.hin, p.win], out_dtype, "TensorOut")
    compute = _backend(call)
    dy, w = grad_output.numpy(), weight.numpy()
    try:
        dx = compute(call, dy, w)
    except AclError as exc:  # an AI Core exception, a failed launch or copy: the device's fault
        if compute is _cpu_compute:
            raise
        disable_after_error(exc)
        if get_device() == "npu":  # asked for the NPU: its error, not a silent CPU result
            raise
        warnings.warn(
            f"pypto: the NPU failed this call ({exc.text}); it was computed on the CPU "
            "instead, and the NPU is not used again in this process",
            RuntimeWarning,
            stacklevel=3,
        )
        dx = _cpu()(call, dy, w)
    return Tensor._wrap(dx, "TensorOut", out_dtype)


try:
    # Imported with pypto, not on the first call: a fork while another thread is inside that
    # import would leave the child waiting forever on CPython's lock of the module. (This
    # reads the CPU's features; the kernel itself loads on first use.)
    from ._kernels.dispatch import conv_backward_input_cpu as _cpu_compute
except ImportError:  # the unbuilt source tree: the first call says how to build it
    _cpu_compute = None


def _cpu():
    global _cpu_compute
    if _cpu_compute is None:
        from ._kernels.dispatch import conv_backward_input_cpu

        _cpu_compute = conv_backward_input_cpu
    return _cpu_compute


def _backend(call):
    """The function that computes this call: the CPU kernel, or the NPU when selected."""
    if select_backend(call) == "npu":
        from .device import conv_backward_input_npu

        return conv_backward_input_npu
    return _cpu()


@argument_errors_are_pypto_errors
def conv_backward_input_size_range(grad_output_shape, weight_shape, strides, paddings, dilations):
    """The valid ``input_size`` heights and widths for a dgrad, one ``(min, max)`` per axis.

    ``HinMin = (Hout-1)*sh - pad_top - pad_bottom + (Kh-1)*dh + 1`` and ``HinMax = HinMin + sh - 1``
    (the forward convolution floors a division by the stride, so several input sizes give the
    same output), clipped to the legal dimension range [1, 1000000]; likewise for W.

    Returns
    -------
    ((hin_min, hin_max), (win_min, win_max))

    Raises
    ------
    pypto.error.ConvBpInputError
        Bad argument types, ranks or ranges, or an axis on which no input size is valid.
    """
    dy, w, s, p, d = size_range_args(grad_output_shape, weight_shape, strides, paddings, dilations)
    ranges = []
    for axis, name in ((0, "H"), (1, "W")):
        lo, hi = clipped_bounds(
            dy[2 + axis], w[2 + axis], s[axis], p[2 * axis], p[2 * axis + 1], d[axis]
        )
        if lo > hi:
            raise ConvBpValueError(
                "O1",
                f"No input size along {name} gives grad_output size "
                f"{dy[2 + axis]} with these kernel, stride, padding "
                "and dilation values.",
            )
        ranges.append((lo, hi))
    return tuple(ranges)
