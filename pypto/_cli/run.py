"""No command (the built-in examples) and ``run`` (a problem you give): a problem on random
data, timed and checked against a float64 NumPy reference."""

import math
import time

import numpy as np

import pypto
from pypto import pypto_impl
from pypto._core.memory import check_host_memory
from pypto._dtypes import DTYPE_NAMES, numpy_dtype
from pypto._golden.accuracy import ulp_at
from pypto._golden.case import comparison_bytes, error_bound, golden_bytes, golden_dgrad, make_case
from pypto._kernels.dispatch import kernel_info

from .args import add_seed
from .problem import add_problem_args, problem_spec

NAME = "run"

# name: (grad_output shape, weight shape, input_size, strides, paddings, dilations, L1, L0)
EXAMPLES = {
    "spec example": (
        (1, 16, 5, 32),
        (16, 16, 3, 3),
        (1, 16, 5, 32),
        (1, 1),
        (1, 1, 1, 1),
        (1, 1),
        (16, 144, 16),
        (16, 16, 16),
    ),
    "ResNet 3x3 layer": (
        (1, 64, 56, 56),
        (64, 64, 3, 3),
        (1, 64, 56, 56),
        (1, 1),
        (1, 1, 1, 1),
        (1, 1),
        (112, 576, 64),
        (112, 144, 64),
    ),
}


def run_example(name, spec, dtype, rng):
    """Run one problem on random data, check it against float64 NumPy, print what happened."""
    dy_shape, w_shape, input_size, strides, paddings, dilations, l1, l0 = spec[:8]
    vec = spec[8] if len(spec) > 8 else (16, 16, 16, 16)
    np_dtype = numpy_dtype(dtype)
    # the rules (and the tiles) and the memory first: random data for a huge problem must not
    # be drawn
    case = make_case(
        dy_shape, w_shape, input_size, dtype, strides, paddings, dilations, (l1, l0), vec
    )
    elements = math.prod(dy_shape) + math.prod(w_shape)
    check_host_memory(
        10 * elements + 2 * golden_bytes(case) + comparison_bytes(case),
        case.problem,
        "random inputs and the float64 check of the result",
    )
    dy = rng.uniform(-1, 1, dy_shape).astype(np_dtype)
    w = rng.uniform(-1, 1, w_shape).astype(np_dtype)
    args = (
        pypto.from_numpy(dy),
        list(input_size),
        pypto.from_numpy(w),
        dtype,
        list(strides),
        list(paddings),
        list(dilations),
    )
    with pypto.options(
        convbp_tile_shapes=(pypto_impl.ConvBpTileL1Info(*l1), pypto_impl.ConvBpTileL0Info(*l0)),
        vec_tile_shapes=list(vec),
    ):
        pypto.conv_backward_input(*args)  # warm-up
        start = time.perf_counter()
        out = pypto.conv_backward_input(*args).numpy()
        seconds = time.perf_counter() - start
    golden = golden_dgrad(case, dy, w)
    # Allowed: half an ulp (the one rounding, to nearest) plus fp32 accumulation over K terms.
    error = np.abs(out.astype(np.float64) - golden)
    within = bool(np.all(error <= error_bound(case, dy, w, golden, rounding_ulps=0.5)))
    err_ulp = error / ulp_at(golden, dtype)
    differ = int(np.count_nonzero(out != golden.astype(np_dtype)))
    print(f"{name}: {case.describe()}")
    print(f"  {case.describe_tiles()}")
    print(
        f"  {seconds * 1e3:.3f} ms, {case.problem.flops / seconds / 1e9:.1f} GFLOP/s; "
        f"max error {err_ulp.max():.3f} ulp; {differ} of {out.size} elements differ from the "
        f"float64 result rounded once; within the fp32-accumulation bound: {within}"
    )
    return within


def banner():
    """The first line of a run: version, backend, ISA level, threads, OpenMP."""
    info = kernel_info()
    return (
        f"pypto {pypto.__version__}: backend cpu ({info['isa']}), "
        f"{pypto.get_num_threads()} thread(s), OpenMP {'on' if info['openmp'] else 'off'}"
    )


def examples(args):
    """No command: the examples above; exit 0 when every one is within the bound, 1 if not."""
    print(banner())
    dtype = DTYPE_NAMES[args.dtype]
    rng = np.random.default_rng(0)
    ok = all([run_example(name, spec, dtype, rng) for name, spec in EXAMPLES.items()])
    print("check against the float64 reference:", "passed" if ok else "FAILED")
    return 0 if ok else 1


def add_parser(commands, common):
    parser = commands.add_parser(
        NAME, parents=[common], help="run one problem on random data and check it"
    )
    add_problem_args(parser)
    add_seed(parser)


def handle(args):
    """``run``: exit 0 when the result is within the bound, 1 if not."""
    print(banner())
    spec, dtype = problem_spec(args)
    ok = run_example("run", spec, dtype, np.random.default_rng(args.seed))
    print("check against the float64 reference:", "passed" if ok else "FAILED")
    return 0 if ok else 1
