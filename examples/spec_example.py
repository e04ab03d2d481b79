"""The specification's example, with real numbers: dgrad of a 3x3 convolution, fp16.

Run: python examples/spec_example.py
"""

import numpy as np

import pypto
from pypto import pypto_impl

rng = np.random.default_rng(1)
grad_output = pypto.from_numpy(rng.uniform(-1, 1, (1, 16, 5, 32)).astype(np.float16), "grad_output")
weight = pypto.from_numpy(rng.uniform(-1, 1, (16, 16, 3, 3)).astype(np.float16), "weight")

# Which input sizes are consistent with this grad_output? (the forward conv floors a division)
print(
    "valid (Hin, Win) ranges:",
    pypto.conv_backward_input_size_range(
        grad_output.shape, weight.shape, [1, 1], [1, 1, 1, 1], [1, 1]
    ),
)

tile_l1_info = pypto_impl.ConvBpTileL1Info(tileML1=16, tileKL1=144, tileNL1=16)
tile_l0_info = pypto_impl.ConvBpTileL0Info(tileML0=16, tileKL0=16, tileNL0=16)
pypto.set_convbp_input_tile_shapes(tile_l1_info, tile_l0_info)
pypto.set_vec_tile_shapes(16, 16, 16, 16)
out = pypto.conv_backward_input(
    grad_output,
    (1, 16, 5, 32),
    weight,
    pypto.DT_FP16,
    strides=[1, 1],
    paddings=[1, 1, 1, 1],
    dilations=[1, 1],
)
dx = out.numpy()
print(out, "first row of channel 0:", dx[0, 0, 0, :8])
