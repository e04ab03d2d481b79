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
import os
import time

from kernel_shapes import (  # this folder, on sys.path
    add_layer_options,
    layer_calls,
    load_kernel_build,
)

from pypto._kernels import dispatch

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(tree, module_name):
    """The kernel module ``module_name`` built in place in ``tree``."""
    folder = os.path.join(tree, *module_name.split(".")[:-1])
    return load_kernel_build(folder, module_name, "kernel_ab (build that tree in place first)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old_tree")
    add_layer_options(parser)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    name = dispatch._kernel().__name__  # the level the dispatcher chose
    builds = {"old": _load(args.old_tree, name), "new": _load(HERE, name)}
    print(f"{name}, {args.threads} thread(s), {args.dtype}; old: {builds['old'].__file__}")
    totals = dict.fromkeys(builds, 0.0)
    for net_name, layers in layer_calls(args):
        for layer, _, arguments in layers:
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
