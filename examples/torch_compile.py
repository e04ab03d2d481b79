"""torch.compile and opcheck: pypto's operator is a torch.library custom op with a fake
(shape) implementation, an autograd formula and autocast kernels, so compiled graphs call it
like any aten op, and torch.library.opcheck checks its registrations.

Run: python examples/torch_compile.py   (needs torch)
"""

import torch
from torch import nn

import pypto.torch


def make():
    torch.manual_seed(0)
    return nn.Sequential(
        pypto.torch.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        pypto.torch.Conv2d(16, 8, 3, stride=2, padding=1),
    )


x = torch.randn(2, 3, 16, 16)
grads = []
for model in (make(), torch.compile(make())):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    out.float().pow(2).sum().backward()
    grads.append([p.grad for p in model.parameters()])
same = all(torch.equal(a, b) for a, b in zip(*grads))
print(f"compiled gradients {'equal' if same else 'DIFFER from'} eager, bit for bit")
assert same

# the operator itself: pypto's conventions (paddings [top, bottom, left, right])
dy = torch.randn(2, 16, 8, 8, dtype=torch.bfloat16)
w = torch.randn(16, 4, 3, 3, dtype=torch.bfloat16)
args = (dy, [2, 4, 8, 8], w, [1, 1], [1, 1, 1, 1], [1, 1], 1)
torch.library.opcheck(torch.ops.pypto.conv_backward_input.default, args)
print("opcheck: schema, autograd registration, fake tensor, AOT dispatch: passed")
