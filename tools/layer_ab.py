"""Time one layer of ``python -m pypto.bench --networks`` under several tile sets, against torch.

    python tools/layer_ab.py "layer4.k.conv1 1x1" [--batch 8] [--threads 2] [--dtype bf16] \
        [--tiles 49:256:256:64:128:128 ...]

The layer is named as in ``pypto/bench/networks.py``. pypto runs with the suggested tiles and
each ``--tiles ML1:KL1:NL1:ML0:KL0:NL0`` given (upstream order M, K, N); torch in the storage dtype
and upcast to fp32, the faster of the two reported as "torch". All runners are interleaved in
one process (the benchmark's ``_median_times``). Used to find what makes a layer class slow
(issue 27); the numbers of a 2-vCPU VM move by 10-30% between runs, so compare within one run.
"""

import argparse

import numpy as np

import pypto
from pypto import pypto_impl
from pypto._dtypes import DTYPE_NAMES
from pypto.bench import Case, _median_times
from pypto.bench.networks import NETWORKS


def _tiles(text):
    values = [int(v) for v in text.split(":")]
    if len(values) != 6:
        raise argparse.ArgumentTypeError(f"{text!r}: expected ML1:KL1:NL1:ML0:KL0:NL0")
    return values


def main():
    layers = {layer.name: layer for net in NETWORKS.values() for layer in net.layers}
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("layer", choices=sorted(layers), metavar="LAYER")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    parser.add_argument("--tiles", type=_tiles, nargs="*", default=[])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()

    import torch

    dtype = DTYPE_NAMES[args.dtype]
    problem = layers[args.layer].problem(args.batch)
    case = Case(args.layer, problem, dtype, np.random.default_rng(0))
    pypto.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    suggested = case.suggested_tiles()
    storage = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    runners = {
        "suggested": case.pypto_runner(suggested),
        "torch storage": case.torch_runner(torch, storage, storage),
        "torch upcast": case.torch_runner(torch, torch.float32, storage),
    }
    for values in args.tiles:
        runners[":".join(map(str, values))] = case.pypto_runner(
            (pypto_impl.ConvBpTileL1Info(*values[:3]), pypto_impl.ConvBpTileL0Info(*values[3:]))
        )
    medians = _median_times(runners, args.rounds, 3.0, pause_s=0.05)
    torch_s = min(medians.pop("torch storage"), medians.pop("torch upcast"))
    l1, l0 = suggested
    print(
        f"{args.layer}: {problem.flops / 1e6:.0f} MFLOP, {args.dtype}, {args.threads} thread(s); "
        f"suggested tiles {l1.as_tuple()} {l0.as_tuple()}"
    )
    print(
        f"  {'torch (faster path)':<28}{torch_s * 1e3:9.3f} ms {problem.flops / torch_s / 1e9:8.1f}"
    )
    for name, seconds in medians.items():
        print(
            f"  {name:<28}{seconds * 1e3:9.3f} ms {problem.flops / seconds / 1e9:8.1f} GFLOP/s"
            f"  torch/pypto {torch_s / seconds:5.2f}"
        )


if __name__ == "__main__":
    main()
