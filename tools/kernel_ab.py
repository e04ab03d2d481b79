"""Time the layers of ``python -m pypto.bench --networks`` on two builds of the kernel in one
process, alternating call by call.

    python tools/kernel_ab.py OLD_TREE [--networks sd_vae_decoder] [--threads 2] \
        [--dtype bf16] [--only NAME-PART] [--calls 5]

OLD_TREE is a checkout built in place (``git worktree add /tmp/old REV``, then ``python
setup.py build_ext --inplace`` there); the new build is the tree this script sits in. Both
builds' kernel modules of the level the dispatcher chose are loaded side by side (each keeps
its own buffers) and called with the same arrays and plan, old and new in turn, the order
swapped every call; per layer the best of ``--calls``. tools/build_ab.py times each build in
its own process, where this VM moved layers of the same plan by 3-14% between processes; here
the builds share the process, so a difference is the build's (a 1-2% move is still within what
a rerun changes: repeat the layers that stand out). Only the kernel is compared: a change in the
Python around it (validation, dispatch) is not seen.
"""

import argparse
import importlib.machinery
import importlib.util
import os
import sys
import time

import numpy as np

import pypto
from pypto._core.rules import validate_conv_backward_input
from pypto._kernels import dispatch
from pypto.bench import Case
from pypto.bench.networks import NETWORKS

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(tree, module_name):
    """The kernel module ``module_name`` built in ``tree``, loaded under its own file."""
    folder = os.path.join(tree, *module_name.split(".")[:-1])
    leaf = module_name.rsplit(".", 1)[1]
    found = [f for f in os.listdir(folder) if f.startswith(leaf + ".") and f.endswith(".so")]
    if not found:
        sys.exit(f"kernel_ab: no {leaf} build in {folder}: build that tree in place first")
    path = os.path.join(folder, found[0])
    loader = importlib.machinery.ExtensionFileLoader(module_name, path)
    module = importlib.util.module_from_spec(
        importlib.util.spec_from_file_location(module_name, path, loader=loader)
    )
    loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old_tree")
    parser.add_argument("--networks", default=",".join(NETWORKS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    parser.add_argument("--only", default="", help="layers whose name contains this")
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    dtype = pypto.DT_FP16 if args.dtype == "fp16" else pypto.DT_BF16
    name = dispatch._kernel().__name__  # the level the dispatcher chose
    builds = {"old": _load(args.old_tree, name), "new": _load(HERE, name)}
    print(f"{name}, {args.threads} thread(s), {args.dtype}; old: {builds['old'].__file__}")
    totals = dict.fromkeys(builds, 0.0)
    for net_name in args.networks.split(","):
        net = NETWORKS[net_name]
        for layer in net.layers:
            if args.only not in layer.name:
                continue
            case = Case(layer.name, layer.problem(net.batch), dtype, np.random.default_rng(0))
            with pypto.options(
                convbp_tile_shapes=case.suggested_tiles(), vec_tile_shapes=[1, 16, 1, 64]
            ):
                call = validate_conv_backward_input(
                    pypto.from_numpy(case.dy),
                    case.input_size,
                    pypto.from_numpy(case.w),
                    dtype,
                    *case.attrs,
                )
            plan = dispatch._plan_of(call)
            out = np.empty(case.input_size, np.uint16)
            # 16-bit patterns: what builds before the buffer protocol (e4881ff) take
            bits = case.dy.view(np.uint16), case.w.view(np.uint16)
            arguments = (*bits, out, plan.dtype, plan.attrs, plan.kernel_tiles, plan.vec_chunks,
                         args.threads)  # fmt: skip
            best = dict.fromkeys(builds, float("inf"))
            for build in builds.values():  # warm-up: panels packed, buffers kept
                build.dgrad(*arguments)
            for i in range(args.calls):
                for label in sorted(builds, reverse=bool(i % 2)):
                    start = time.perf_counter()
                    builds[label].dgrad(*arguments)
                    best[label] = min(best[label], time.perf_counter() - start)
            for label in builds:
                totals[label] += best[label] * layer.count * 1e3
            print(
                f"{net_name:14s} {layer.name:34s} old {best['old'] * 1e3:9.3f} ms  "
                f"new {best['new'] * 1e3:9.3f} ms  {best['new'] / best['old']:.3f}"
            )
    print(
        f"total (each layer times its count): old {totals['old']:.1f} ms, new "
        f"{totals['new']:.1f} ms, new / old {totals['new'] / totals['old']:.3f}"
    )


if __name__ == "__main__":
    main()
