"""Master weights kept by hand: the model runs in bf16, an fp32 copy of each parameter takes
the optimizer's steps (what autocast does for you; see torch_autocast.py).

Run: python examples/torch_master_weights.py   (needs torch)
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
).to(torch.bfloat16)
master = [p.detach().float().requires_grad_() for p in model.parameters()]
opt = torch.optim.SGD(master, lr=0.1)
x, labels = torch.randn(8, 3, 32, 32).to(torch.bfloat16), torch.randint(0, 10, (8,))

for step in range(5):
    model.zero_grad()
    loss = nn.functional.cross_entropy(model(x).float(), labels)
    loss.backward()
    for p, m in zip(model.parameters(), master):
        m.grad = p.grad.float()
    opt.step()
    with torch.no_grad():
        for p, m in zip(model.parameters(), master):
            p.copy_(m)  # rounded to bf16 once a step
    print(f"step {step}: loss {loss.item():.4f}")
