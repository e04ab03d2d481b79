"""Make a real msprobe dump on CPU torch (run as a script: msprobe's PrecisionDebugger is one per
process and keeps its first config).

    python make_dump.py OUT LEVEL TASK STEP[,STEP...]

Each STEP is one debugger step (msprobe's folder stepN):
  bf16, fp16  a small CNN: conv 3->16 3x3 stride 2 pad 1, conv 16->16 3x3 pad 2 dilation 2,
              conv 16->32 1x1, conv 32->32 3x3 pad 1 groups 4 (with ReLUs), input 2x3x64x64
  forms       conv2d called with other arguments: stride (2, 1) and padding "valid"; padding
              "same"; fp32; an input that needs no grad
  wide        bf16, the model of the new-user note (docs: shared/notes/new-user-2026-12.md):
              conv 8->32 3x3 pad 1, conv 32->32 3x3 stride 2 pad 1, conv 32->16 3x3 pad 2
              dilation 2 (with ReLUs), input 2x8x24x24: 32-channel tasks, one per image
Exit code 3 and "IMPORT-ERROR ..." when torch or msprobe cannot be imported.
"""

import json
import sys

try:
    import torch
    import torch.nn.functional as F
    from msprobe.pytorch import PrecisionDebugger
    from torch import nn
except ImportError as exc:  # the tests skip on this
    print(f"IMPORT-ERROR {exc}")
    sys.exit(3)


def cnn(dtype):
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=2, dilation=2),
        nn.ReLU(),
        nn.Conv2d(16, 32, 1),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, groups=4),
    ).to(dtype)


def wide():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(8, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 16, 3, padding=2, dilation=2),
    ).to(torch.bfloat16)


class Forms(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.w = nn.Parameter(torch.randn(16, 16, 3, 3).mul(0.1).to(torch.bfloat16))
        self.w32 = nn.Parameter(torch.randn(16, 16, 3, 3).mul(0.1))

    def forward(self, x, x32):
        a = F.conv2d(x, self.w, stride=(2, 1), padding="valid")  # judged: no padding
        b = F.conv2d(x, self.w, padding="same")  # skipped: string padding
        c = F.conv2d(x32, self.w32, padding=1)  # skipped: fp32
        d = F.conv2d(x.detach(), self.w, None, 1, 1)  # skipped: no grad_input
        return a.float().sum() + b.float().sum() + c.sum() + d.float().sum()


def main():
    out, level, task, steps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
    config = {
        "task": task,
        "dump_path": out,
        "rank": [],
        "step": [],
        "level": level,
        task: {"scope": [], "list": [], "data_mode": ["all"]},
    }
    if task == "statistics":
        config[task]["summary_mode"] = "statistics"
    path = out + ".config.json"
    with open(path, "w") as f:
        json.dump(config, f)
    debugger = PrecisionDebugger(config_path=path)
    for step in steps:
        if step in ("bf16", "fp16"):
            dtype = torch.bfloat16 if step == "bf16" else torch.float16
            model = cnn(dtype)
            torch.manual_seed(2)
            x = torch.randn(2, 3, 64, 64, dtype=dtype, requires_grad=True)
            debugger.start(model)
            model(x).float().pow(2).sum().backward()
        elif step == "wide":
            model = wide()
            x = torch.randn(2, 8, 24, 24, dtype=torch.bfloat16, requires_grad=True)
            debugger.start(model)
            model(x).float().pow(2).sum().backward()
        else:
            model = Forms()
            torch.manual_seed(3)
            x = torch.randn(1, 16, 8, 8, dtype=torch.bfloat16, requires_grad=True)
            x32 = torch.randn(1, 16, 8, 8, requires_grad=True)
            debugger.start(model)
            model(x, x32).backward()
        debugger.stop()
        debugger.step()


if __name__ == "__main__":
    main()
