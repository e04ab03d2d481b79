"""Generated sweep case files: tiny mixed problems, both dtypes, some the op refuses.

Shared by tests/sweep and ``.ci/sweep_proof`` (the 1,000-case proof that a local run, shards
and a Dask LocalCluster give identical rows).
"""

import json

import numpy as np


def generated_cases(count, seed=0):
    """``count`` case dicts of pypto's JSONL format (tiny shapes: milliseconds each). About one
    in eight is one the op refuses (asymmetric padding, groups 2, fp32, stride 64); some give
    their tiles, some "all" legal ones (2 at most), some a seed, a distribution or a range."""
    rng = np.random.default_rng(seed)
    cases = []
    for index in range(count):
        kh, kw = (int(v) for v in rng.integers(1, 4, 2))
        stride, dilation = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        pad = int(rng.integers(0, min(kh, kw)))
        case = {
            "name": f"case-{index}",
            "N": int(rng.integers(1, 3)),
            "Cin": int(rng.choice([8, 16, 24])),
            "H": int(rng.integers(dilation * (kh - 1) + 1, 10)),
            "W": int(rng.integers(dilation * (kw - 1) + 1, 12)),
            "Cout": int(rng.choice([16, 20, 32])),
            "kh": kh,
            "kw": kw,
            "strides": [stride, stride],
            "paddings": [pad] * 4,
            "dilations": [dilation, dilation],
            "dtype": ["fp16", "bf16"][index % 2],
        }
        kind = index % 8
        if kind == 1:
            case["paddings"] = [1, 0, 1, 1]  # A4: asymmetric
        elif kind == 3 and index % 16 == 3:
            case["groups"] = 2  # G1
        elif kind == 3:
            case["dtype"] = "fp32"  # D1
        elif kind == 5 and index % 24 == 5:
            case["strides"] = [64, 1]  # A1
        elif kind == 6:
            case.update(tiles="all", tiles_limit=2)
        if index % 5 == 0:
            case["dist"] = ["normal", "ints", "truncated_normal"][index % 3]
        if index % 7 == 0:
            case["range"] = [-2, 3]
            case["dist"] = "uniform"
        if index % 9 == 0:
            case["seed"] = index
        cases.append(case)
    return cases


def write_jsonl(path, cases):
    with open(path, "w") as f:
        for case in cases:
            f.write(json.dumps(case) + "\n")
    return str(path)
