"""Time each layer of ``python -m pypto.bench --networks`` on each register-block shape the kernel
may choose, in one process, to see which is fastest on this CPU.

    python tools/kernel_shapes.py [--networks sd_vae_decoder] [--threads 2] [--dtype bf16] \
        [--only NAME-PART] [--json PATH]

Per layer (suggested tiles, vec tile [1, 16, 1, 64]) the kernel runs three ways, interleaved,
best of 5 after a warm-up: its own choice ("default"), the channel-vector kernels without the
wide 6 x 64 shape ("no wide") and the pixel-vector kernels only ("pixel"), through the kernel's
``use_wide`` and ``use_chan_vec`` switches. Every shape gives the same bits, so only the time
differs. Prints each layer's times and path, and each network's totals (each layer times its
count). Choices that depend on the CPU (pypto_isa.h: PYPTO_CV_L0_BYTES, PYPTO_PIXEL_COLS) were
made from this comparison (docs/performance-log.md); a 2-vCPU VM moves single runs by several
percent, so repeat a layer that stands out.
"""

import argparse
import glob
import importlib.machinery
import importlib.util
import json
import os
import time

import numpy as np

import pypto
from pypto._core.rules import validate_conv_backward_input
from pypto._kernels import dispatch
from pypto.bench import Case
from pypto.bench.networks import NETWORKS

SETTINGS = (("default", {}), ("no wide", {"use_wide": False}), ("pixel", {"use_chan_vec": False}))


def _best_ms(run, calls=5):
    run()
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def load_kernel_file(path, module_name):
    """The extension module at ``path``, loaded as ``module_name`` beside any other build of it
    (each keeps its own buffers): the A/B tools' way to call two builds in one process."""
    loader = importlib.machinery.ExtensionFileLoader(module_name, path)
    module = importlib.util.module_from_spec(
        importlib.util.spec_from_file_location(module_name, path, loader=loader)
    )
    loader.exec_module(module)
    return module


def load_kernel_build(folder, module_name, tool):
    """``module_name``'s build in ``folder`` (its .so file there), or exit saying ``tool``
    found none."""
    leaf = module_name.rsplit(".", 1)[1]
    found = sorted(glob.glob(os.path.join(folder, leaf + ".*so")))
    if not found:
        raise SystemExit(f"{tool}: no {leaf} build in {folder}")
    return load_kernel_file(found[0], module_name)


def add_layer_options(parser):
    """The options that pick the layers and how they run (this tool's and kernel_ab.py's)."""
    parser.add_argument("--networks", default=",".join(NETWORKS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    parser.add_argument("--only", default="", help="layers whose name contains this")


def layer_calls(args):
    """Per network, ``(name, layers)``; layers yields ``(layer, case, arguments)`` for each
    layer the options pick: ``kernel.dgrad(*arguments)`` runs it with its suggested tiles, vec
    tile [1, 16, 1, 64] and ``args.threads``, on 16-bit patterns (what every build takes)."""
    dtype = pypto.DT_FP16 if args.dtype == "fp16" else pypto.DT_BF16

    def layers(net):
        for layer in net.layers:
            if args.only not in layer.name:
                continue
            case = Case(layer.name, layer.problem(net.batch), dtype, np.random.default_rng(0))
            dy, w = pypto.from_numpy(case.dy), pypto.from_numpy(case.w)
            with pypto.options(
                convbp_tile_shapes=case.suggested_tiles(), vec_tile_shapes=[1, 16, 1, 64]
            ):
                call = validate_conv_backward_input(dy, case.input_size, w, dtype, *case.attrs)
            plan = dispatch._plan_of(call)
            out = np.empty(plan.shapes[2], np.uint16)
            bits = case.dy.view(np.uint16), case.w.view(np.uint16)
            yield layer, case, (*bits, out, plan.dtype, plan.attrs, plan.kernel_tiles,
                                plan.vec_chunks, args.threads)  # fmt: skip

    for name in args.networks.split(","):
        yield name, layers(NETWORKS[name])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_layer_options(parser)
    parser.add_argument("--json", help="write every row as JSON")
    args = parser.parse_args()
    kernel = dispatch._kernel()
    print(f"level {kernel.ISA}, {args.threads} thread(s), {args.dtype}")
    rows = []
    for name, layers in layer_calls(args):
        totals = dict.fromkeys((label for label, _ in SETTINGS), 0.0)
        for layer, case, arguments in layers:
            row = {"network": name, "layer": layer.name, "count": layer.count}
            for label, switches in SETTINGS:

                def run(arguments=arguments, switches=switches):
                    return kernel.dgrad(*arguments, **switches)

                row[label + " path"] = run()
                row[label] = _best_ms(run)
                totals[label] += row[label] * layer.count
            rows.append(row)
            p = case.problem
            print(
                f"{name[:14]:14s} {layer.name[:28]:28s} {p.cin:4d}<-{p.cout:<4d} "
                f"{p.hin:3d}x{p.win:<3d} {p.kh}x{p.kw}/{p.sh} "
                + " ".join(f"{label} {row[label]:8.3f}" for label, _ in SETTINGS)
                + f"  {row['default path']}",
                flush=True,
            )
        base = totals["default"] or float("nan")
        print(
            f"{name}: "
            + ", ".join(f"{label} {t:.1f} ms ({t / base:.3f})" for label, t in totals.items())
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
