"""``python -m pypto``: run conv_backward_input on built-in examples and check the numbers.

Prints the version and backend, then for the specification's example and a ResNet-size layer:
shapes, tiles, time, GFLOP/s and the error against a float64 NumPy reference (in units of the
output dtype's ulp, and how many elements differ from the once-rounded float64 value).
"""

import argparse
import sys
import time

import numpy as np

import pypto
from pypto import pypto_impl
from pypto._cpu import openmp_enabled
from pypto._dtypes import numpy_dtype
from pypto._numpy_dgrad import dgrad_gemm_col2im
from pypto._tiling import ConvProblem

# name: (grad_output shape, weight shape, input_size, strides, paddings, dilations, L1, L0)
EXAMPLES = {
    "spec example": ((1, 16, 5, 32), (16, 16, 3, 3), (1, 16, 5, 32), (1, 1), (1, 1, 1, 1), (1, 1),
                     (16, 144, 16), (16, 16, 16)),
    "ResNet 3x3 layer": ((1, 64, 56, 56), (64, 64, 3, 3), (1, 64, 56, 56), (1, 1), (1, 1, 1, 1),
                         (1, 1), (112, 576, 64), (112, 144, 64)),
}


def _ulp(values, dtype):
    """Spacing of the output dtype's grid at each value (float64)."""
    v = np.abs(values.astype(np.float64))
    mantissa_bits, min_exp = (10, -14) if dtype == pypto.DT_FP16 else (7, -126)
    exponent = np.floor(np.log2(np.maximum(v, 2.0 ** min_exp)))
    return 2.0 ** (exponent - mantissa_bits)


def run_example(name, spec, dtype, rng):
    dy_shape, w_shape, input_size, strides, paddings, dilations, l1, l0 = spec
    np_dtype = numpy_dtype(dtype)
    dy = rng.uniform(-1, 1, dy_shape).astype(np_dtype)
    w = rng.uniform(-1, 1, w_shape).astype(np_dtype)
    pypto.set_convbp_input_tile_shapes(pypto_impl.ConvBpTileL1Info(*l1),
                                       pypto_impl.ConvBpTileL0Info(*l0))
    pypto.set_vec_tile_shapes(16, 16, 16, 16)
    args = (pypto.from_numpy(dy), list(input_size), pypto.from_numpy(w), dtype, list(strides),
            list(paddings), list(dilations))
    pypto.conv_backward_input(*args)  # warm-up
    start = time.perf_counter()
    out = pypto.conv_backward_input(*args).numpy()
    seconds = time.perf_counter() - start
    ref = dgrad_gemm_col2im(dy, w, input_size[2:], strides, paddings, dilations)
    # Allowed: half an ulp (the one rounding) plus fp32 accumulation over K terms.
    magnitude = dgrad_gemm_col2im(np.abs(dy), np.abs(w), input_size[2:], strides, paddings,
                                  dilations)
    k_terms = w_shape[0] * w_shape[2] * w_shape[3]
    error = np.abs(out.astype(np.float64) - ref)
    within = bool(np.all(error <= 0.5 * _ulp(ref, dtype) + k_terms * 2.0 ** -24 * magnitude))
    err_ulp = error / _ulp(ref, dtype)
    differ = int(np.count_nonzero(out != ref.astype(np_dtype)))
    n, cout, hout, wout = dy_shape
    flops = ConvProblem(n, w_shape[1], cout, input_size[2], input_size[3], hout, wout,
                        w_shape[2], w_shape[3], *strides, *paddings, *dilations).flops
    print(f"{name}: grad_output {list(dy_shape)} weight {list(w_shape)} -> input_size "
          f"{list(input_size)}, strides {list(strides)}, paddings {list(paddings)}, "
          f"dilations {list(dilations)}, {dtype}")
    print(f"  tiles L1 (M, K, N) = {l1}, L0 = {l0}, vec = {pypto.get_vec_tile_shapes()}")
    print(f"  {seconds * 1e3:.3f} ms, {flops / seconds / 1e9:.1f} GFLOP/s; "
          f"max error {err_ulp.max():.3f} ulp; {differ} of {out.size} elements differ from the "
          f"float64 result rounded once; within the fp32-accumulation bound: {within}")
    return within


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pypto", description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads (default: OMP_NUM_THREADS or all CPUs)")
    args = parser.parse_args(argv)
    dtype = pypto.DT_FP16 if args.dtype == "fp16" else pypto.DT_BF16
    try:
        pypto.set_num_threads(args.threads)
    except pypto.PyptoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"pypto {pypto.__version__}: backend cpu, {pypto.get_num_threads()} thread(s), "
          f"OpenMP {'on' if openmp_enabled() else 'off'}")
    rng = np.random.default_rng(0)
    ok = all([run_example(name, spec, dtype, rng) for name, spec in EXAMPLES.items()])
    print("check against the float64 reference:", "passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
