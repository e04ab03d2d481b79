"""Tune NPU tile shapes on a laptop: suggest, explain, time a few, fix an illegal set.

The tiles pypto runs with are legal on an Atlas A2/A3 NPU (the same rules upstream checks), so
what you tune here can be set unchanged on the device.

Run: python examples/tile_tuning.py
"""

import time

import ml_dtypes
import numpy as np

import pypto
from pypto.pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info

# A ResNet layer: dy [8, 128, 28, 28], weight [128, 128, 3, 3], stride 1, pad 1.
dy_shape, w_shape, size = [8, 128, 28, 28], [128, 128, 3, 3], [8, 128, 28, 28]
args = ([1, 1], [1, 1, 1, 1], [1, 1])
dtype = pypto.DT_BF16

suggested = pypto.suggest_convbp_input_tile_shapes(dy_shape, w_shape, size, dtype, *args)
print("suggested:", *suggested)
print(
    pypto.explain_convbp_input_tiling(
        dy_shape, w_shape, size, dtype, *args, *suggested, vec_tile_shapes=[16, 16, 16, 16]
    )
)

rng = np.random.default_rng(0)
dy = pypto.from_numpy(rng.uniform(-1, 1, dy_shape).astype(ml_dtypes.bfloat16))
w = pypto.from_numpy(rng.uniform(-1, 1, w_shape).astype(ml_dtypes.bfloat16))
candidates = {
    "spec example's tiles": (ConvBpTileL1Info(16, 144, 16), ConvBpTileL0Info(16, 16, 16)),
    "suggested": suggested,
    "whole rows, K blocks of 64 channels": (
        ConvBpTileL1Info(112, 576, 64),
        ConvBpTileL0Info(112, 144, 64),
    ),
}
flops = 2 * 8 * 128 * 128 * 9 * 28 * 28
for name, tiles in candidates.items():
    with pypto.options(convbp_tile_shapes=tiles, vec_tile_shapes=[16, 16, 16, 16]):
        pypto.conv_backward_input(dy, size, w, dtype, *args)
        start = time.perf_counter()
        pypto.conv_backward_input(dy, size, w, dtype, *args)
        seconds = time.perf_counter() - start
    print(f"{name:<38} {seconds * 1e3:8.2f} ms  {flops / seconds / 1e9:7.1f} GFLOP/s")

# An illegal set: which rules fail, and the nearest legal tiles.
report = pypto.explain_convbp_input_tiling(
    dy_shape,
    w_shape,
    size,
    dtype,
    *args,
    ConvBpTileL1Info(30, 150, 100),
    ConvBpTileL0Info(32, 160, 100),
    vec_tile_shapes=[16, 16, 16, 16],
)
print(
    "\n"
    + "\n".join(
        line
        for line in str(report).splitlines()
        if "FAIL" in line or "nearest" in line or "verdict" in line
    )
)
