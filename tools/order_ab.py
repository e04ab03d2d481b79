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
layer the best of ``--calls``, after a warm-up; totals weight each layer by its count, and a
second total takes each layer's median (the bench's statistic: it counts the calls a busy
host slows, where the best does not).
This VM moved whole-network runs by several percent between minutes: the ratios of one run,
taken call by call, are what to trust.
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
    totals, medians = [0.0, 0.0], [0.0, 0.0]
    for net_name, layers in layer_calls(args):
        for layer, _, arguments in layers:
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
            best = [min(t) for t in seconds]
            for i in (0, 1):
                totals[i] += best[i] * layer.count * 1e3
                medians[i] += float(np.median(seconds[i])) * layer.count * 1e3
            print(
                f"{net_name:14s} {layer.name:34s} x{layer.count:<2d} {best[0] * 1e3:9.3f} ms "
                f"{best[1] * 1e3:9.3f} ms  {best[1] / best[0]:.3f}"
            )
    print(
        f"total (each layer times its count): {labels[0]} {totals[0]:.1f} ms, {labels[1]} "
        f"{totals[1]:.1f} ms, ratio {totals[1] / totals[0]:.3f}"
    )
    print(
        f"total of medians: {labels[0]} {medians[0]:.1f} ms, {labels[1]} {medians[1]:.1f} ms, "
        f"ratio {medians[1] / medians[0]:.3f}"
    )


if __name__ == "__main__":
    main()
