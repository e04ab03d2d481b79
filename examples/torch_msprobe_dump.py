"""Make an msprobe dump of a PyTorch model's backward and judge its convolutions with pypto.

msprobe's PrecisionDebugger (mindstudio-probe) dumps every API's tensors at level L1, the
backward's included; ``pypto compare --msprobe`` then judges each conv2d's dumped grad_input
against pypto's float64 golden by CANN's standards, without a second (benchmark) dump.

Run: python examples/torch_msprobe_dump.py [OUT]   (needs torch and mindstudio-probe)
"""

import json
import os
import subprocess
import sys
import tempfile

import torch
from msprobe.pytorch import PrecisionDebugger
from torch import nn

out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="pypto-msprobe-")
config = {
    "task": "tensor",  # the tensors themselves, not only their statistics
    "dump_path": out,
    "rank": [],
    "step": [],
    "level": "L1",  # APIs (torch.nn.functional.conv2d ...), forward and backward
    "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
}
config_path = os.path.join(out, "config.json")
os.makedirs(out, exist_ok=True)
with open(config_path, "w") as f:
    json.dump(config, f)

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(8, 32, 3, padding=1),
    nn.ReLU(),
    nn.Conv2d(32, 16, 3, stride=2, padding=1),
).to(torch.bfloat16)
x = torch.randn(2, 8, 24, 24, dtype=torch.bfloat16, requires_grad=True)

debugger = PrecisionDebugger(config_path=config_path)
debugger.start(model)
model(x).float().pow(2).sum().backward()
debugger.stop()
debugger.step()

# exit 0 when every judged call passes, 1 when one fails, 2 for a bad dump
done = subprocess.run([sys.executable, "-m", "pypto", "compare", "--msprobe", out])
sys.exit(done.returncode)
