"""Mixed precision with torch.autocast: fp32 parameters, bf16 convolutions, pypto's dgrad.

The usual recipe, unchanged: the model keeps fp32 weights, ``torch.autocast`` casts each
convolution's inputs to bf16, and the backward lands fp32 gradients in the fp32 parameters.
``swap_convs`` turns an existing model's nn.Conv2d layers into pypto.torch.Conv2d (same
parameters, same state dict), whose grad_input pypto computes.

Run: python examples/torch_autocast.py   (needs torch)
"""

import torch
from torch import nn

import pypto.torch


def swap_convs(model):
    """Replace every nn.Conv2d of ``model`` (in place) by a pypto.torch.Conv2d sharing its
    parameters; returns the model."""
    for name, child in model.named_children():
        if type(child) is nn.Conv2d:
            setattr(model, name, pypto.torch.Conv2d.from_conv(child))
        else:
            swap_convs(child)
    return model


torch.manual_seed(0)
model = swap_convs(
    nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, labels = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))

for step in range(5):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x), labels)
    loss.backward()  # outside autocast, as torch recommends
    opt.step()
    print(f"step {step}: loss {loss.item():.4f}")

weight = model[2].weight
assert weight.dtype == torch.float32 and weight.grad.dtype == torch.float32
print("pypto.torch.Conv2d layers: fp32 weights, fp32 gradients, bf16 convolutions")
