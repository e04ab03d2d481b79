"""Time the layers of ``python -m pypto.bench --networks`` under two builds, alternating.

    python tools/build_ab.py OLD_TREE [--networks resnet50,inception_v3] [--threads 1] \
        [--dtype bf16] [--only taps|NAME-PART] [--rounds 2]

OLD_TREE is a checkout built in place (``git worktree add /tmp/old REV``, then ``python
setup.py build_ext --inplace`` there); the new build is the tree this script sits in. Each
round runs one fresh process per build (old first in even rounds, new first in odd ones), each
timing every layer as the best of 5 calls after one warm-up; the result per layer is the best
over the rounds. Prints the layers
that moved by more than 1.5% and the totals (each layer times its count). On a shared VM single
runs move by several percent: compare builds only within one run, and repeat a layer that
stands out with more rounds (issue 27's commits report their numbers this way).
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TIMER = """
import json, sys, time
import numpy as np
import pypto
from pypto.bench import Case
from pypto.bench.networks import NETWORKS

networks, threads, dtype, only = json.loads(sys.argv[1])
pypto.set_num_threads(threads)
out = {}
for name in networks:
    net = NETWORKS[name]
    for layer in net.layers:
        taps = layer.kh * layer.kw > 1
        if only and not (only == "taps" and taps) and only not in layer.name:
            continue
        case = Case(layer.name, layer.problem(net.batch),
                    pypto.DT_FP16 if dtype == "fp16" else pypto.DT_BF16,
                    np.random.default_rng(0))
        run = case.pypto_runner(case.suggested_tiles())
        run()
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
        out[name + ":" + layer.name] = (best * 1e3, layer.count)
print(json.dumps(out))
"""


def _times(tree, spec):
    done = subprocess.run(
        [sys.executable, "-c", TIMER, json.dumps(spec)],
        env={**os.environ, "PYTHONPATH": tree},
        capture_output=True,
        text=True,
        cwd="/",
    )
    if done.returncode:
        sys.exit(f"{tree}: {done.stderr}")
    return json.loads(done.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", help="a checkout built in place")
    parser.add_argument("--networks", default="resnet50,inception_v3,yolov5s")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    parser.add_argument("--only", default="", help='"taps" (layers with Kh*Kw > 1) or a name part')
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    spec = [args.networks.split(","), args.threads, args.dtype, args.only]
    runs = {"old": [], "new": []}
    trees = [("old", os.path.abspath(args.old)), ("new", HERE)]
    for round_ in range(args.rounds):
        # which build goes first alternates: a round's first process meets a colder machine
        for which, tree in trees if round_ % 2 == 0 else trees[::-1]:
            runs[which].append(_times(tree, spec))
    total = {"old": 0.0, "new": 0.0}
    moved = []
    for key in runs["old"][0]:
        old = min(r[key][0] for r in runs["old"])
        new = min(r[key][0] for r in runs["new"])
        count = runs["old"][0][key][1]
        total["old"] += old * count
        total["new"] += new * count
        moved.append((new / old, key, old, new, count))
    for ratio, key, old, new, count in sorted(moved):
        if abs(ratio - 1) > 0.015:
            print(f"{key:50s} x{count} old {old:8.3f} new {new:8.3f} ms  {ratio:.3f}")
    old, new = total["old"], total["new"]
    print(
        f"total, {args.threads} thread(s), {args.dtype}, {args.networks}: old {old:.1f} ms, "
        f"new {new:.1f} ms, new/old {new / old:.4f}"
    )


if __name__ == "__main__":
    main()
