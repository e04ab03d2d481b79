"""fp16 mixed precision with torch.amp.GradScaler: autocast to fp16, the loss scaled so that
small gradients survive fp16, the step skipped when a gradient overflows.

pypto computes the scaled grad_input in fp16 storage with fp32 accumulation; GradScaler
unscales the fp32 parameter gradients before the step, as for any model.

Run: python examples/torch_gradscaler.py   (needs torch)
"""

import torch
from torch import nn

import pypto.torch

torch.manual_seed(0)
model = nn.Sequential(
    pypto.torch.Conv2d(3, 16, 3, padding=1),
    nn.ReLU(),
    pypto.torch.Conv2d(16, 16, 3, padding=1),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(16, 10),
)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
x, labels = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))

for step in range(5):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.cross_entropy(model(x), labels)
    scaler.scale(loss).backward()
    scaler.step(opt)  # unscales, skips the step on Inf/NaN gradients
    scaler.update()
    print(f"step {step}: loss {loss.item():.4f}, scale {scaler.get_scale():g}")

assert all(p.grad.dtype == torch.float32 for p in model.parameters())
