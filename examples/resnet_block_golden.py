"""Golden check of a whole ResNet block's input gradient: pypto's dgrad chain against PyTorch.

The block (stride-2 "downsample" variant): y = conv2(relu(conv1(x))) + shortcut(x), with conv1
3x3 stride 2, conv2 3x3 stride 1, shortcut 1x1 stride 2. Given dL/dy, the input gradient is

    dx = dgrad(conv1, relu'(h) * dgrad(conv2, dy)) + dgrad(shortcut, dy)

pypto computes each dgrad in bf16 (or fp16) storage with fp32 accumulation; PyTorch's autograd
gives the float64 golden value from the same rounded weights and dy.

Run: python examples/resnet_block_golden.py [fp16|bf16]   (needs torch)
"""

import sys

import ml_dtypes
import numpy as np
import torch

import pypto

DTYPE = {"fp16": pypto.DT_FP16, "bf16": pypto.DT_BF16}[sys.argv[1] if len(sys.argv) > 1 else "bf16"]
NP_DTYPE = np.float16 if DTYPE == pypto.DT_FP16 else ml_dtypes.bfloat16
N, C_IN, C_OUT, H = 2, 32, 64, 28
rng = np.random.default_rng(7)


def storage(array):
    """Round to the storage dtype and back to float64 (what both sides then start from)."""
    return np.asarray(array, dtype=np.float64).astype(NP_DTYPE)


def dgrad(dy, w, input_hw, stride, pad):
    """One layer's input gradient with pypto, tiles suggested for the layer."""
    size = [dy.shape[0], w.shape[1], *input_hw]
    args = ([stride, stride], [pad] * 4, [1, 1])
    tiles = pypto.suggest_convbp_input_tile_shapes(dy.shape, w.shape, size, DTYPE, *args)
    with pypto.options(convbp_tile_shapes=tiles, vec_tile_shapes=[1, 16, 1, 64]):
        out = pypto.conv_backward_input(
            pypto.from_numpy(dy), size, pypto.from_numpy(w), DTYPE, *args
        )
    return out.numpy()


x = rng.standard_normal((N, C_IN, H, H))
w1 = storage(rng.standard_normal((C_OUT, C_IN, 3, 3)) / np.sqrt(C_IN * 9))
w2 = storage(rng.standard_normal((C_OUT, C_OUT, 3, 3)) / np.sqrt(C_OUT * 9))
ws = storage(rng.standard_normal((C_OUT, C_IN, 1, 1)) / np.sqrt(C_IN))
dy = storage(rng.standard_normal((N, C_OUT, H // 2, H // 2)))

# Golden: float64 autograd through the block.
tx = torch.tensor(x, requires_grad=True)
t = lambda a: torch.tensor(a.astype(np.float64))  # noqa: E731
h = torch.nn.functional.conv2d(tx, t(w1), stride=2, padding=1)
y = torch.nn.functional.conv2d(torch.relu(h), t(w2), padding=1) + torch.nn.functional.conv2d(
    tx, t(ws), stride=2
)
y.backward(t(dy))
golden = tx.grad.numpy()

# pypto: the same chain, one dgrad per layer, storage dtype between layers.
g_relu = dgrad(dy, w2, (H // 2, H // 2), 1, 1)
g_h = storage(g_relu.astype(np.float64) * (h.detach().numpy() > 0))
dx = dgrad(g_h, w1, (H, H), 2, 1).astype(np.float64) + dgrad(dy, ws, (H, H), 2, 0)

rel = np.linalg.norm(dx - golden) / np.linalg.norm(golden)
# Three roundings to the storage dtype along the chain: a few units of its epsilon.
eps = 2.0**-8 if DTYPE == pypto.DT_BF16 else 2.0**-11
print(
    f"ResNet block dgrad, {DTYPE}: relative L2 error vs float64 PyTorch autograd {rel:.2e} "
    f"(storage epsilon {eps:.1e}); max |diff| {np.abs(dx - golden).max():.2e}"
)
raise SystemExit(0 if rel < 4 * eps else 1)
