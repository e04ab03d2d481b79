"""Time bf16 in sum_order "tile" on two builds of the avx512_amx kernel in one process,
alternating call by call (this VM moved the same layer by up to 30% between minutes; builds
sharing the process see the same moments). Per layer the best of --calls for each.

    cp pypto/_kernels/kernel/dgrad_avx512_amx*.so /tmp/old.so     # before the change
    python setup.py build_ext --inplace                             # the change
    python tools/tile_ab.py /tmp/old.so pypto/_kernels/kernel/dgrad_avx512_amx*.so \
        --layers "8 256 1024 14 14 1,8 256 256 14 14 3" [--threads 1] [--calls 24]

A layer is "N CIN COUT H W K [STRIDE]": a KxK dgrad of N images, H x W input, "same" padding.
Both builds must give the same bits (checked). Run it pinned (taskset -c 1) and alone.
"""

import argparse
import time

import ml_dtypes
import numpy as np
from kernel_shapes import load_kernel_file  # this folder, on sys.path

from pypto._kernels import features

NAME = "pypto._kernels.kernel.dgrad_avx512_amx"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--layers", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=24)
    args = parser.parse_args()
    if features.request_amx_permission():
        raise SystemExit("tile_ab: the OS refuses AMX tile data to this process")
    builds = [load_kernel_file(args.old, NAME), load_kernel_file(args.new, NAME)]
    rng = np.random.default_rng(0)
    for text in args.layers.split(","):
        values = [int(v) for v in text.split()]
        n, cin, cout, h, w, k = values[:6]
        s = values[6] if len(values) > 6 else 1
        hout, wout = (h + 2 * (k // 2) - k) // s + 1, (w + 2 * (k // 2) - k) // s + 1
        dy = rng.standard_normal((n, cout, hout, wout)).astype(ml_dtypes.bfloat16).view(np.uint16)
        wt = (rng.standard_normal((cout, cin, k, k)) * 0.05).astype(ml_dtypes.bfloat16)
        wt = wt.view(np.uint16)
        outs = [np.empty((n, cin, h, w), np.uint16) for _ in builds]
        attrs = (s, s, k // 2, k // 2, 1, 1)
        best = [float("inf")] * 2
        for call in range(args.calls):
            for i in (0, 1) if call % 2 else (1, 0):
                start = time.perf_counter()
                builds[i].dgrad_tile(dy, wt, outs[i], attrs, args.threads, True)
                best[i] = min(best[i], time.perf_counter() - start)
        if not np.array_equal(outs[0], outs[1]):
            raise SystemExit(f"tile_ab: the builds' bits differ on {text}")
        macs = n * cin * cout * hout * wout * k * k
        print(
            f"{text:24} old {best[0] * 1e3:8.3f} ms  new {best[1] * 1e3:8.3f} ms  "
            f"new/old {best[1] / best[0]:.3f}   old {macs / best[0] / 1e9:.0f} G MAC/s"
        )


if __name__ == "__main__":
    main()
