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


def nhwc_msopst_case(
    name="dx_nhwc", n=2, cin=16, hw=(7, 9), cout=32, k=3, stride=2, pad=1, dtype="bfloat16"
):
    """One msOpST Conv2DBackpropInput case as CANN writes it by default: out_backprop, y and
    input_size in NHWC, the filter in HWCN, 4-value strides in NHWC order."""
    h, w = hw
    hout, wout = ((v + 2 * pad - k) // stride + 1 for v in hw)
    return {
        "case_name": name,
        "op": "Conv2DBackpropInput",
        "input_desc": [
            {
                "name": "input_size",
                "format": "ND",
                "type": "int32",
                "shape": [4],
                "value": [n, h, w, cin],
            },
            {
                "name": "filter",
                "format": "HWCN",
                "type": dtype,
                "shape": [k, k, cin, cout],
                "data_distribute": "uniform",
                "value_range": [-1.0, 1.0],
            },
            {
                "name": "out_backprop",
                "format": "NHWC",
                "type": dtype,
                "shape": [n, hout, wout, cout],
                "data_distribute": "normal",
                "value_range": [0.0, 1.0],
            },
        ],
        "output_desc": [{"name": "y", "format": "NHWC", "type": dtype, "shape": [n, h, w, cin]}],
        "attr": [
            {"name": "strides", "type": "list_int", "value": [1, stride, stride, 1]},
            {"name": "pads", "type": "list_int", "value": [pad] * 4},
            {"name": "dilations", "type": "list_int", "value": [1, 1, 1, 1]},
            {"name": "groups", "type": "int", "value": 1},
            {"name": "data_format", "type": "str", "value": "NHWC"},
        ],
    }
