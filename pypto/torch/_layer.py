"""``Conv2d``: nn.Conv2d whose backward computes grad_input with pypto."""

import torch
import torch.nn.functional as F

from ._functional import conv2d


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
