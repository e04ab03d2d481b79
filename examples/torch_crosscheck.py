"""Cross-check a plain PyTorch model: judge torch's own grad_input of each convolution by
CANN's accuracy standards against pypto's float64 golden, while it trains.

``every=4`` judges one convolution in four each step (four steps reach every layer),
``model=`` names each call's layer in the table, ``report=`` writes the table at exit.

Run: python examples/torch_crosscheck.py [REPORT.csv]   (needs torch)
"""

import sys

import torch
from torch import nn

import pypto.torch

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1),
    nn.ReLU(),
    nn.Conv2d(16, 32, 3, stride=2, padding=1),
    nn.ReLU(),
    nn.Conv2d(32, 32, 3, padding=1),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(32, 10),
)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, labels = torch.randn(4, 3, 32, 32, requires_grad=True), torch.randint(0, 10, (4,))
report = sys.argv[1] if len(sys.argv) > 1 else None

check = pypto.torch.crosscheck(every=2, model=model, report=report)
for _ in range(2):
    with check:
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        opt.step()

print(check.table())
summary = check.summary()
assert summary["judged"] == 3 and summary["failed"] == 0, summary
