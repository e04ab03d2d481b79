"""Check pypto's NPU path against its CPU kernel: the spec example, a ResNet layer, three
problems no single launch holds (rewritten into stride/dilation phases and folded taps), and
three with non-finite results: Inf and NaN in dy, Inf and NaN in the weight, and fp16 overflow.

Run on an Atlas A2/A3 host once the kernel library is built (see docs/npu.md):

    python examples/npu_check.py [--dtype fp16|bf16]

For each example it prints the shapes, both results' first values, the time of each path and
how far they differ. The two sum in different orders, so they agree within one output ulp plus
the fp32 accumulation bound (K * 2^-24 * sum|dy*w| per side). The CPU side is
``conv_backward_input_cpu``, what ``pypto.set_device("cpu")`` runs. In the non-finite problems
NaN, +Inf and -Inf must also sit at the same positions on both sides: an NPU that gives +-65504
(fp16; +-max for bf16) where the CPU has +-Inf, or 0 where it has NaN, converted with the
Fixpipe's saturating mode (CTRL[48]), which the kernel sets to keep Inf/NaN. Exit status 0 when
every problem agrees. On a host without a usable NPU it prints why and exits 0.
"""

import argparse
import sys
import time

import numpy as np

import pypto
import pypto.device as device
from pypto import pypto_impl
from pypto._cli.run import EXAMPLES
from pypto._core.rules import validate_conv_backward_input
from pypto._dtypes import numpy_dtype
from pypto._kernels.dispatch import conv_backward_input_cpu
from pypto._npu.plan import plan_launches

# Problems the AscendC API cannot hold in one launch: pypto/_npu/decompose.py rewrites them.
REWRITTEN = {
    "stride 7, dilations 32x19 (stride and dilation phases)": (
        (1, 16, 39, 92),
        (16, 16, 6, 6),
        (1, 16, 218, 1),
        (7, 1),
        (106, 106, 93, 93),
        (32, 19),
        (1, 576, 16),
        (16, 16, 16),
    ),
    "dilation phases with windows padded past the kernel reach before (issue 13, finding 2)": (
        (3, 1, 13, 1),
        (1, 40, 16, 1),
        (3, 40, 630, 2),
        (15, 22),
        (170, 170, 0, 0),
        (52, 2),
        (1, 256, 64),
        (16, 16, 64),
    ),
    "37x26 kernel, 962 taps (taps folded into channels)": (
        (1, 16, 42, 27),
        (16, 16, 37, 26),
        (1, 16, 78, 52),
        (1, 1),
        (0, 0, 0, 0),
        (1, 1),
        (1, 15392, 16),
        (16, 16, 16),
    ),
}


# Non-finite results, on the spec example's problem (K = 16 * 3 * 3 = 144 terms per output):
# name -> how to make (dy, w) from uniform(-1, 1) draws (numpy float64 arrays, changed in place).
def _inf_nan_in_dy(dy, w):
    dy[0, 3, 2, 7] = np.inf
    dy[0, 5, 0, 0] = -np.inf
    dy[0, 9, 4, 31] = np.nan
    dy[0, 12, 1, 15] = np.inf  # and -Inf next to it: NaN where both land with opposite signs
    dy[0, 12, 1, 16] = -np.inf


def _inf_nan_in_weight(dy, w):
    # handled on the host (pypto/_core/nonfinite.py: the kernel sees these entries as 0 and the
    # reached outputs are recomputed), so this checks that path, not the Fixpipe's mode
    w[2, 5, 1, 1] = np.inf  # the centre tap: reaches every output of channel 5
    w[7, 11, 0, 2] = np.nan  # a corner tap: the padding must not turn it into NaN elsewhere
    w[9, 0, 2, 2] = -np.inf


def _fp16_overflow(dy, w):
    # dy and w around 200: each product about 4e4, sums of up to 144 of them far past 65504,
    # +Inf for input channels 0-3, -Inf for 4-7; channels 8-15 have |w| <= 1 and stay finite
    # (|sum| <= 250 * 144 = 36000). bf16 holds all of them.
    rng = np.random.default_rng(1)
    dy[...] = rng.uniform(150, 250, dy.shape)
    w[:, 0:4] = rng.uniform(150, 250, w[:, 0:4].shape)
    w[:, 4:8] = -rng.uniform(150, 250, w[:, 4:8].shape)


NON_FINITE = {
    "Inf and NaN in dy": _inf_nan_in_dy,
    "Inf and NaN in the weight": _inf_nan_in_weight,
    "fp16 overflow (sums far past 65504)": _fp16_overflow,
}


def timed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return result, (time.perf_counter() - start) * 1e3


def check(name, spec, dtype, rng, make_non_finite=None):
    dy_shape, w_shape, input_size, strides, paddings, dilations, l1, l0 = spec
    pypto.set_convbp_input_tile_shapes(
        pypto_impl.ConvBpTileL1Info(*l1), pypto_impl.ConvBpTileL0Info(*l0)
    )
    pypto.set_vec_tile_shapes(16, 16, 16, 16)
    call = validate_conv_backward_input(
        pypto.Tensor(list(dy_shape), dtype),
        list(input_size),
        pypto.Tensor(list(w_shape), dtype),
        dtype,
        list(strides),
        list(paddings),
        list(dilations),
    )
    np_dtype = numpy_dtype(dtype)
    dy, w = rng.uniform(-1, 1, dy_shape), rng.uniform(-1, 1, w_shape)
    if make_non_finite is not None:
        make_non_finite(dy, w)
    dy, w = dy.astype(np_dtype), w.astype(np_dtype)
    npu, npu_ms = timed(device.conv_backward_input_npu, call, dy, w)
    cpu, cpu_ms = timed(conv_backward_input_cpu, call, dy, w)

    a, b = npu.astype(np.float64), cpu.astype(np.float64)
    mantissa_bits, min_exponent = (10, -14) if dtype == pypto.DT_FP16 else (7, -126)
    with np.errstate(invalid="ignore", over="ignore"):
        finite = np.isfinite(a) & np.isfinite(b)
        a_f, b_f = np.where(finite, a, 0.0), np.where(finite, b, 0.0)
        biggest = np.maximum(np.maximum(np.abs(a_f), np.abs(b_f)), 2.0**min_exponent)
        ulp = 2.0 ** (np.floor(np.log2(biggest)) - mantissa_bits)
        magnitude = np.abs(conv_backward_input_cpu(call, np.abs(dy), np.abs(w)).astype(np.float64))
        k_terms = w_shape[0] * w_shape[2] * w_shape[3]
        bound = ulp + 2 * k_terms * 2.0**-24 * np.where(finite, magnitude, 0.0) * 1.01
        within = bool(np.all(np.abs(a_f - b_f) <= bound))

    print(
        f"{name}: grad_output {list(dy_shape)} weight {list(w_shape)} -> input_size "
        f"{list(input_size)}, strides {list(strides)}, paddings {list(paddings)}, "
        f"dilations {list(dilations)}, {dtype}"
    )
    plan = plan_launches(call)
    print(f"  {len(plan.pieces)} sub-problem(s), {plan.launch_count} launch(es)")
    print(f"  NPU dx[0, 0, 0, :6] = {a[0, 0, 0, :6].tolist()}  ({npu_ms:.2f} ms incl. transfers)")
    print(f"  CPU dx[0, 0, 0, :6] = {b[0, 0, 0, :6].tolist()}  ({cpu_ms:.2f} ms)")
    if make_non_finite is None:
        print(
            f"  {int(np.count_nonzero(a != b))} of {a.size} elements differ, at most "
            f"{float((np.abs(a - b) / ulp).max()):.1f} ulp; "
            + (
                "NPU and CPU agree within the fp32-accumulation bound"
                if within
                else "NPU and CPU DISAGREE beyond the fp32-accumulation bound"
            )
        )
        return within
    return _report_non_finite(a, b, finite, within, dtype)


def _report_non_finite(a, b, finite, within, dtype):
    """Positions of NaN, +Inf and -Inf on both sides; the finite rest within the bound."""
    kinds = {"NaN": np.isnan, "+Inf": lambda x: np.isposinf(x), "-Inf": lambda x: np.isneginf(x)}
    same = True
    for kind, test in kinds.items():
        on_npu, on_cpu = test(a), test(b)
        print(
            f"  {kind}: {int(on_cpu.sum())} on the CPU, {int(on_npu.sum())} on the NPU, "
            f"{int((on_npu != on_cpu).sum())} position(s) differ"
        )
        same &= bool(np.array_equal(on_npu, on_cpu))
    largest = 65504.0 if dtype == pypto.DT_FP16 else float.fromhex("0x1.fep127")
    saturated = int((np.isinf(b) & (np.abs(a) == largest)).sum())
    zeroed = int((np.isnan(b) & (a == 0)).sum())
    if saturated or zeroed:
        signs = [f"{saturated} +-Inf of the CPU are +-{largest:g} on the NPU"] if saturated else []
        signs += [f"{zeroed} NaN of the CPU are 0 on the NPU"] if zeroed else []
        print(
            f"  {' and '.join(signs)}: the Fixpipe converted in its saturating mode (CTRL[48], "
            "which the kernel sets to keep Inf/NaN; docs/npu.md)"
        )
    ok = same and within
    print(
        "  "
        + (
            "NPU matches the CPU: same NaN/+Inf/-Inf positions, finite values within the "
            "fp32-accumulation bound"
            if ok
            else "NPU DIFFERS from the CPU "
            + ("in its NaN/Inf positions" if not same else "beyond the fp32-accumulation bound")
        )
    )
    return ok


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    args = parser.parse_args(argv)
    # Whether the NPU can run at all, not whether `auto` would use it: this check is what to run
    # when the self-check failed (`pypto selfcheck` states that verdict; this shows the numbers).
    reason = device.runtime_unavailable_reason()
    if reason is not None:
        print(f"NPU path unavailable: {reason}")
        return 0
    verdict = device.known_self_check()
    if verdict is not None:
        print(
            f"self-check on this device ({verdict['checked_at']}): "
            + ("passed" if verdict["passed"] else f"FAILED: {verdict['summary']}")
        )
    dtype = pypto.DT_FP16 if args.dtype == "fp16" else pypto.DT_BF16
    rng = np.random.default_rng(0)
    problems = {**EXAMPLES, **REWRITTEN}
    results = [check(name, spec, dtype, rng) for name, spec in problems.items()]
    rng = np.random.default_rng(1)
    results += [
        check(name, EXAMPLES["spec example"], dtype, rng, make) for name, make in NON_FINITE.items()
    ]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
