"""Shape arithmetic of the convolution: forward output size and the backward input-size range.

Pure integer functions; the validation table (rule O1) and the public
``conv_backward_input_size_range`` both use them.
"""

__all__ = ["forward_out_size", "input_size_bounds"]

MAX_DIM = 1000000


def forward_out_size(size_in, kernel, stride, pad_before, pad_after, dilation):
    """Output length of a forward convolution along one axis (floor division, as PyTorch)."""
    return (size_in + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1


def input_size_bounds(size_out, kernel, stride, pad_before, pad_after, dilation):
    """Unclipped ``(lo, hi)`` of the input lengths whose forward output is ``size_out``.

    ``lo = (out - 1) * stride - pads + (kernel - 1) * dilation + 1`` and ``hi = lo + stride - 1``
    (the specification's HinMin / HinMax). ``lo`` may be below 1 for large padding; callers
    clip to the legal dimension range.
    """
    lo = (size_out - 1) * stride - pad_before - pad_after + (kernel - 1) * dilation + 1
    return lo, lo + stride - 1


def clipped_bounds(size_out, kernel, stride, pad_before, pad_after, dilation):
    """``input_size_bounds`` intersected with the legal range ``[1, MAX_DIM]`` (may be empty)."""
    lo, hi = input_size_bounds(size_out, kernel, stride, pad_before, pad_after, dilation)
    return max(lo, 1), min(hi, MAX_DIM)
