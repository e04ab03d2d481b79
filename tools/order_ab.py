"""Time bf16 in sum_order "tile" layer by layer on the layers of ``python -m pypto.bench
--networks``: against the sequential order of the same build, or (``--old``) against another
build's tile order, in one process, alternating call by call.

    PYPTO_CPU_ISA=avx2 python tools/order_ab.py --networks resnet50 --threads 2
    PYPTO_CPU_ISA=avx2 python tools/order_ab.py --old /tmp/old --networks resnet50 --threads 2

The tile order runs as the emulation (``dgrad_tile`` with the tile unit off; ``--tile-unit``
lets it serve where the process may use it). ``--old`` is a folder holding another build's
kernel modules (``cp pypto/_kernels/kernel/dgrad_*.so /tmp/old/`` before the change); both
builds must give the same bits (checked on each layer). The sequential order runs from a copy
of the module, so that each order keeps its own packed weight (in one module they took turns
packing it: before 2026-12-07 this tool's tile / sequential ratios counted both packs). Per
layer the best of ``--calls``, after a warm-up; a network's totals weight each layer by its
count, and a second total takes each layer's median (the bench's statistic: it counts the
calls a busy host slows, where the best does not).
This VM moved whole-network runs by several percent between minutes, and a network's ratio
by up to 4% between runs: ``--rounds N`` sweeps the layers N times and prints each network's
median ratio over the rounds.
"""

import argparse
import shutil
import tempfile
import time
from functools import partial

import numpy as np
from kernel_shapes import (  # this folder, on sys.path
    add_layer_options,
    layer_calls,
    load_kernel_build,
)

from pypto._kernels import dispatch


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_layer_options(parser)
    parser.add_argument("--old", help="a folder with another build's kernel modules")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument(
        "--rounds", type=int, default=1, help="sweeps of every layer (layers printed once)"
    )
    parser.add_argument("--tile-unit", action="store_true", help="let the AMX unit serve")
    args = parser.parse_args()
    args.dtype = "bf16"
    kernel = dispatch._kernel()
    use_unit = args.tile_unit and dispatch.tile_unit_usable(kernel)
    old = load_kernel_build(args.old, kernel.__name__, "order_ab") if args.old else None
    # the sequential order from a second copy of the module: one module keeps one packed
    # weight, so calls of the two orders taking turns in one would each pack it again
    with tempfile.TemporaryDirectory() as copy:
        shutil.copy(kernel.__file__, copy)
        sequential = load_kernel_build(copy, kernel.__name__, "order_ab")
    labels = ("old tile", "new tile") if old else ("sequential", "tile")
    print(f"{kernel.__name__}, {args.threads} thread(s), tile unit {use_unit}: {labels}")
    ratios = {}  # network: per round, the ratio of its totals (bests; medians)
    for round_ in range(args.rounds):
        totals = {}
        for net_name, layers in layer_calls(args):  # the same data each round
            for layer, _, arguments in layers:
                best, median = _time_layer(
                    args, kernel, sequential, old, use_unit, layer, arguments
                )
                net = totals.setdefault(net_name, np.zeros(4))  # bests, then medians
                net += np.array([*best, *median]) * layer.count * 1e3
                if round_ == 0:
                    print(
                        f"{net_name:14s} {layer.name:34s} x{layer.count:<2d} "
                        f"{best[0] * 1e3:9.3f} ms {best[1] * 1e3:9.3f} ms  "
                        f"{best[1] / best[0]:.3f}"
                    )
        for net_name, net in totals.items():
            ratios.setdefault(net_name, []).append((net[1] / net[0], net[3] / net[2]))
            print(
                f"round {round_ + 1}: {net_name}: {labels[0]} {net[0]:.1f} ms, {labels[1]} "
                f"{net[1]:.1f} ms, ratio {net[1] / net[0]:.3f} (of medians {net[3] / net[2]:.3f})"
            )
    if args.rounds > 1:
        for net_name, rounds in ratios.items():
            best = sorted(r[0] for r in rounds)
            print(
                f"{net_name}: ratio of bests over {args.rounds} rounds: median "
                f"{float(np.median(best)):.3f}, range {best[0]:.3f}-{best[-1]:.3f}"
            )


def _time_layer(args, kernel, sequential, old, use_unit, layer, arguments):
    """The best and the median of ``args.calls`` calls of each build or order, alternating"""
    dy, w, out, _, attrs, _, _, threads = arguments
    outs = (out.copy(), out.copy())
    tile = (dy, w), (attrs, threads, use_unit)
    runs = (
        (partial(old.dgrad_tile, *tile[0], outs[0], *tile[1]) if old
         else partial(sequential.dgrad, *arguments)),
        partial(kernel.dgrad_tile, *tile[0], outs[1], *tile[1]),
    )  # fmt: skip
    for run in runs:
        run()
    if old and not np.array_equal(*outs):
        raise SystemExit(f"order_ab: {layer.name}: the builds' bits differ")
    seconds = ([], [])
    for call in range(args.calls):
        for i in (0, 1) if call % 2 == 0 else (1, 0):
            start = time.perf_counter()
            runs[i]()
            seconds[i].append(time.perf_counter() - start)
    return [min(t) for t in seconds], [float(np.median(t)) for t in seconds]


if __name__ == "__main__":
    main()
