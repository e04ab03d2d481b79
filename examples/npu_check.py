"""Check pypto's NPU path against its CPU kernel: the spec example, a ResNet layer, and two
problems no single launch holds (rewritten into stride/dilation phases and folded taps).

Run on an Atlas A2/A3 host once the kernel library is built (see docs/npu.md):

    python examples/npu_check.py [--dtype fp16|bf16]

For each example it prints the shapes, both results' first values, the time of each path and
how far they differ. The two sum in different orders, so they agree within one output ulp plus
the fp32 accumulation bound (K * 2^-24 * sum|dy*w| per side). Exit status 0 when every
problem agrees. On a host without a usable NPU it prints why and exits 0.
"""

import argparse
import sys
import time

import numpy as np

import pypto
import pypto.device as device
from pypto import pypto_impl
from pypto._cli import EXAMPLES
from pypto._kernels.dispatch import conv_backward_input_cpu
from pypto._dtypes import numpy_dtype
from pypto._core.rules import validate_conv_backward_input
from pypto._npu.plan import plan_launches

# Problems the AscendC API cannot hold in one launch: pypto/_npu/decompose.py rewrites them.
REWRITTEN = {
    "stride 7, dilations 32x19 (stride and dilation phases)": (
        (1, 16, 39, 92), (16, 16, 6, 6), (1, 16, 218, 1), (7, 1), (106, 106, 93, 93), (32, 19),
        (1, 576, 16), (16, 16, 16)),
    "dilation phases with windows padded past the kernel reach before (issue 13, finding 2)": (
        (3, 1, 13, 1), (1, 40, 16, 1), (3, 40, 630, 2), (15, 22), (170, 170, 0, 0), (52, 2),
        (1, 256, 64), (16, 16, 64)),
    "37x26 kernel, 962 taps (taps folded into channels)": (
        (1, 16, 42, 27), (16, 16, 37, 26), (1, 16, 78, 52), (1, 1), (0, 0, 0, 0), (1, 1),
        (1, 15392, 16), (16, 16, 16)),
}


def timed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return result, (time.perf_counter() - start) * 1e3


def check(name, spec, dtype, rng):
    dy_shape, w_shape, input_size, strides, paddings, dilations, l1, l0 = spec
    pypto.set_convbp_input_tile_shapes(pypto_impl.ConvBpTileL1Info(*l1),
                                       pypto_impl.ConvBpTileL0Info(*l0))
    pypto.set_vec_tile_shapes(16, 16, 16, 16)
    call = validate_conv_backward_input(pypto.Tensor(list(dy_shape), dtype), list(input_size),
                                        pypto.Tensor(list(w_shape), dtype), dtype, list(strides),
                                        list(paddings), list(dilations))
    np_dtype = numpy_dtype(dtype)
    dy = rng.uniform(-1, 1, dy_shape).astype(np_dtype)
    w = rng.uniform(-1, 1, w_shape).astype(np_dtype)
    npu, npu_ms = timed(device.conv_backward_input_npu, call, dy, w)
    cpu, cpu_ms = timed(conv_backward_input_cpu, call, dy, w)

    a, b = npu.astype(np.float64), cpu.astype(np.float64)
    mantissa_bits, min_exponent = (10, -14) if dtype == pypto.DT_FP16 else (7, -126)
    biggest = np.maximum(np.maximum(np.abs(a), np.abs(b)), 2.0 ** min_exponent)
    ulp = 2.0 ** (np.floor(np.log2(biggest)) - mantissa_bits)
    magnitude = np.abs(conv_backward_input_cpu(call, np.abs(dy), np.abs(w)).astype(np.float64))
    k_terms = w_shape[0] * w_shape[2] * w_shape[3]
    agree = bool(np.all(np.abs(a - b) <= ulp + 2 * k_terms * 2.0 ** -24 * magnitude * 1.01))

    print(f"{name}: grad_output {list(dy_shape)} weight {list(w_shape)} -> input_size "
          f"{list(input_size)}, strides {list(strides)}, paddings {list(paddings)}, "
          f"dilations {list(dilations)}, {dtype}")
    plan = plan_launches(call)
    print(f"  {len(plan.pieces)} sub-problem(s), {plan.launch_count} launch(es)")
    print(f"  NPU dx[0, 0, 0, :6] = {a[0, 0, 0, :6].tolist()}  ({npu_ms:.2f} ms incl. transfers)")
    print(f"  CPU dx[0, 0, 0, :6] = {b[0, 0, 0, :6].tolist()}  ({cpu_ms:.2f} ms)")
    print(f"  {int(np.count_nonzero(a != b))} of {a.size} elements differ, at most "
          f"{float((np.abs(a - b) / ulp).max()):.1f} ulp; "
          + ("NPU and CPU agree within the fp32-accumulation bound" if agree
             else "NPU and CPU DISAGREE beyond the fp32-accumulation bound"))
    return agree


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    args = parser.parse_args(argv)
    reason = device.unavailable_reason()
    if reason is not None:
        print(f"NPU path unavailable: {reason}")
        return 0
    dtype = pypto.DT_FP16 if args.dtype == "fp16" else pypto.DT_BF16
    rng = np.random.default_rng(0)
    problems = {**EXAMPLES, **REWRITTEN}
    return 0 if all([check(name, spec, dtype, rng) for name, spec in problems.items()]) else 1


if __name__ == "__main__":
    sys.exit(main())
