"""What ``pypto.torch.crosscheck`` costs a training step: ``python -m pypto.bench.crosscheck``.

One ResNet-18 (torchvision's layout, built here: 7x7/2 stem, max pool, four stages of two
basic blocks, 1x1/2 downsampling, global pool, fc) trains in bf16 with SGD. Each round times,
interleaved in one process, a plain step; a step inside the mode with nothing judged (the
mode, its hooks and the rows alone: what every call pays); and a step inside the mode for each
``--every`` and ``--budget`` asked, each also with each ``--images`` asked. The medians and
their ratios to the plain step are printed, with the calls judged and the seconds spent
judging them. Needs PyTorch.
"""

import argparse
import contextlib
import statistics
import sys
import time


def resnet18(torch, classes=1000, width=64):
    """ResNet-18 with BatchNorm, as torchvision lays it out (no torchvision needed)."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.downsample is None else self.downsample(x)))

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            stages, cin = [], width
            for i, cout in enumerate((width, 2 * width, 4 * width, 8 * width)):
                stages.append(
                    nn.Sequential(Block(cin, cout, 1 if i == 0 else 2), Block(cout, cout, 1))
                )
                cin = cout
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))

    return ResNet18()


def _parse(argv):
    parser = argparse.ArgumentParser(
        prog="python -m pypto.bench.crosscheck", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--batch", type=int, default=8, help="images a step (default 8)")
    parser.add_argument("--size", type=int, default=224, help="image height and width (224)")
    parser.add_argument("--threads", type=int, default=2, help="torch's threads (default 2)")
    parser.add_argument(
        "--judging-threads", type=int, default=1, help="crosscheck's threads= (default 1)"
    )
    parser.add_argument(
        "--every", default="10", help="comma-separated every= values to time (default 10)"
    )
    parser.add_argument(
        "--budget", default="", help="comma-separated budget= shares to time (e.g. 0.3)"
    )
    parser.add_argument(
        "--images",
        default="",
        help="comma-separated images= values: each --every and --budget also timed with each",
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    args = parser.parse_args(argv)
    try:
        args.every = [int(v) for v in args.every.split(",") if v.strip()]
        args.budget = [float(v) for v in args.budget.split(",") if v.strip()]
        args.images = [int(v) for v in args.images.split(",") if v.strip()]
    except ValueError:
        parser.error("--every, --budget and --images take comma-separated numbers")
    if any(not 0 < b <= 1 for b in args.budget):
        parser.error("--budget: each share must be in (0, 1]")
    for name in ("batch", "size", "threads", "judging_threads", "rounds"):
        if getattr(args, name) < 1 or any(v < 1 for v in args.every + args.images):
            parser.error(f"--{name.replace('_', '-')}, --every and --images take ints >= 1")
    return args


def main(argv=None):
    args = _parse(argv)
    try:
        import torch
    except ImportError:
        print("error: the cross-check benchmark needs PyTorch", file=sys.stderr)
        return 2
    import pypto.torch as pt
    from pypto._kernels import kernel_info

    class ModeOnly(pt.crosscheck):
        """The mode with every call left out: what the mode, its hooks and the rows cost."""

        def _left_out(self, position):
            return "benchmark: the mode alone"

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = resnet18(torch).to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, 3, args.size, args.size).to(torch.bfloat16)
    labels = torch.randint(0, 1000, (args.batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x).float(), labels).backward()
        opt.step()

    variants = {"plain": None, "mode, nothing judged": ModeOnly(threads=args.judging_threads)}
    for images in [None, *args.images]:
        sample = "" if images is None else f" images={images}"
        common = {
            "threads": args.judging_threads,
            "model": model,
            "keep_failures": 0,
            "images": images,
        }
        for every in args.every:
            variants[f"every={every}{sample}"] = pt.crosscheck(every=every, **common)
        for budget in args.budget:
            variants[f"budget={budget:g}{sample}"] = pt.crosscheck(budget=budget, **common)
    times = {name: [] for name in variants}
    for mode in variants.values():  # warm-up: oneDNN's primitives, tile suggestions
        with mode if mode is not None else contextlib.nullcontext():
            step()
    for _ in range(args.rounds):
        for name, mode in variants.items():
            start = time.perf_counter()
            with mode if mode is not None else contextlib.nullcontext():
                step()
            times[name].append(time.perf_counter() - start)

    info = kernel_info()
    print(
        f"ResNet-18 bf16 training step (SGD), batch {args.batch}, {args.size}x{args.size}, "
        f"torch {torch.__version__} on {args.threads} thread(s), judging on "
        f"{args.judging_threads}; median of {args.rounds} interleaved rounds"
        + f"; pypto's kernel level {info['isa']}"
    )
    plain = statistics.median(times["plain"])
    for name, mode in variants.items():
        t = statistics.median(times[name])
        line = f"  {name:<24} {t * 1e3:9.1f} ms  {t / plain:5.2f}x"
        if mode is not None and not isinstance(mode, ModeOnly):
            rows = [r for r in mode.rows if r["seconds"] is not None]
            per_step = len(rows) / (args.rounds + 1)
            seconds = sum(r["seconds"] for r in rows) / (args.rounds + 1)
            line += f"  ({per_step:.1f} calls judged a step, {seconds * 1e3:.0f} ms judging)"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
