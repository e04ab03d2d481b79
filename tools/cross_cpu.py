"""Bitwise cross-CPU check: the same problems on the same inputs, digested, so runs on different
CPUs (native, under QEMU, on AArch64) can be compared bit for bit.

    PYPTO_CPU_ISA=baseline python tools/cross_cpu.py run --out native-baseline.json
    qemu-x86_64 -cpu Nehalem python tools/cross_cpu.py run --out nehalem.json \
        --expect-level baseline --label "qemu Nehalem"
    python tools/cross_cpu.py compare native-baseline.json nehalem.json

``run`` computes every case with the installed pypto (fp16 and bf16, 1 and 2 threads, the
suggested tiles and a second legal set) and writes the level used and a SHA-256 of each case's
inputs and output bits. ``compare`` exits 1 unless every case has equal inputs and outputs. The
fp32 levels (baseline, avx2, avx512, AArch64's baseline) are bitwise equal by design: products of
fp16/bf16 values are exact in fp32 and every level sums in the same order. The avx512_bf16
level's dot product sums pairs and is not part of this equality. bf16 in sum_order "tile"
("bf16-tile" cases) is bitwise equal on every level, the AMX tile unit's included.
"""

import argparse
import hashlib
import json
import platform
import sys

import numpy as np

# name: (input_size NCHW, weight [Cout, Cin, Kh, Kw], strides, paddings, dilations)
CASES = {
    "spec_3x3": ((1, 16, 5, 32), (16, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "resnet_3x3": ((1, 64, 14, 14), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "stride2_odd": ((2, 24, 15, 17), (20, 24, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "dilation2": ((1, 8, 12, 14), (12, 8, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
    "pointwise": ((1, 40, 9, 11), (33, 40, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    "5x5_stride3": ((1, 5, 20, 19), (7, 5, 5, 5), (3, 3), (2, 2, 2, 2), (1, 1)),
    "stem_7x7_s2": ((1, 3, 32, 32), (16, 3, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
    "mixed_s_d": ((1, 16, 10, 12), (8, 16, 3, 3), (2, 1), (1, 1, 2, 2), (1, 2)),
    "co_blocks": ((2, 40, 9, 21), (100, 40, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    # 8 images of 7x7: the tile order interleaves them where a level masks lanes (AVX2, AVX-512)
    "batch8_7x7": ((8, 24, 7, 7), (40, 24, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
}


def _output_hw(size, kernel, stride, pad, dilation):
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def _inputs(name, input_size, w_shape, strides, paddings, dilations, np_dtype):
    n, cin, hin, win = input_size
    cout, _, kh, kw = w_shape
    hout = _output_hw(hin, kh, strides[0], paddings[0], dilations[0])
    wout = _output_hw(win, kw, strides[1], paddings[2], dilations[1])
    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")
    rng = np.random.default_rng(seed)
    dy = rng.uniform(-1, 1, (n, cout, hout, wout)).astype(np_dtype)
    w = rng.uniform(-1, 1, w_shape).astype(np_dtype)
    return dy, w


def _digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint16).tobytes())
    return h.hexdigest()[:24]


def _tile_sets(pypto, dy, w, input_size, dtype, strides, paddings, dilations):
    suggested = pypto.suggest_convbp_input_tile_shapes(
        dy.shape, w.shape, input_size, dtype, strides, paddings, dilations
    )
    # the suggested M-L1 (a legal number of whole rows), the least K-L1, the least L0 blocks
    small = (
        pypto.pypto_impl.ConvBpTileL1Info(
            suggested[0].as_tuple()[0], w.shape[2] * w.shape[3] * 16, 16
        ),
        pypto.pypto_impl.ConvBpTileL0Info(16, 16, 16),
    )
    return {"suggested": suggested, "small": small}


def run_cases():
    # imported here: ``compare`` needs only the JSON files, not pypto
    import ml_dtypes

    import pypto

    # name: (dtype, array type, bf16 summation order)
    dtypes = {
        "fp16": (pypto.DT_FP16, np.float16, "sequential"),
        "bf16": (pypto.DT_BF16, ml_dtypes.bfloat16, "sequential"),
        "bf16-tile": (pypto.DT_BF16, ml_dtypes.bfloat16, "tile"),
    }
    results = {}
    for name, (input_size, w_shape, strides, paddings, dilations) in CASES.items():
        for dtype_name, (dtype, np_dtype, order) in dtypes.items():
            dy, w = _inputs(name, input_size, w_shape, strides, paddings, dilations, np_dtype)
            tiles = _tile_sets(pypto, dy, w, input_size, dtype, strides, paddings, dilations)
            for tile_name, (l1, l0) in tiles.items():
                for threads in (1, 2):
                    pypto.set_num_threads(threads)
                    with pypto.options(
                        convbp_tile_shapes=(l1, l0),
                        vec_tile_shapes=[16, 16, 16, 16],
                        sum_order=order,
                    ):
                        out = pypto.conv_backward_input(
                            pypto.from_numpy(dy),
                            list(input_size),
                            pypto.from_numpy(w),
                            dtype,
                            list(strides),
                            list(paddings),
                            list(dilations),
                        ).numpy()
                    key = f"{name}/{dtype_name}/{tile_name}/{threads}t"
                    results[key] = {"inputs": _digest(dy, w), "output": _digest(out)}
    return results


def cmd_run(args):
    from pypto._kernels.dispatch import kernel_info

    info = kernel_info()
    if args.expect_level and info["isa"] != args.expect_level:
        print(
            f"cross_cpu: level {info['isa']} in use, expected {args.expect_level} "
            f"[{info['reason']}]",
            file=sys.stderr,
        )
        return 1
    cases = run_cases()
    report = {
        "label": args.label or platform.machine(),
        "level": info["isa"],
        "reason": info["reason"],
        "machine": platform.machine(),
        "cpu_features": info["cpu_features"],
        "cases": cases,
    }
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(
        f"cross_cpu: {len(cases)} cases at level {info['isa']} on {report['label']} -> {args.out}"
    )
    return 0


def cmd_compare(args):
    with open(args.expected) as f:
        expected = json.load(f)
    with open(args.actual) as f:
        actual = json.load(f)
    bad = []
    for key, want in expected["cases"].items():
        got = actual["cases"].get(key)
        if got is None:
            bad.append(f"{key}: missing")
        elif got["inputs"] != want["inputs"]:
            bad.append(f"{key}: different inputs (generation differs, not the kernel)")
        elif got["output"] != want["output"]:
            bad.append(f"{key}: output differs")
    label = f"{actual['label']} ({actual['level']}) vs {expected['label']} ({expected['level']})"
    if bad or len(actual["cases"]) != len(expected["cases"]):
        print(
            f"cross_cpu: {label}: {len(bad)} of {len(expected['cases'])} cases differ",
            *bad,
            sep="\n  ",
        )
        return 1
    print(f"cross_cpu: {label}: all {len(expected['cases'])} cases bitwise equal")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run")
    run.add_argument("--out", required=True)
    run.add_argument("--expect-level", help="fail unless pypto chose this ISA level")
    run.add_argument("--label", help="what ran it, for the comparison's message")
    compare = commands.add_parser("compare")
    compare.add_argument("expected")
    compare.add_argument("actual")
    args = parser.parse_args(argv)
    return cmd_run(args) if args.command == "run" else cmd_compare(args)


if __name__ == "__main__":
    sys.exit(main())
