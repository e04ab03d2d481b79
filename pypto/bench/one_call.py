"""Measurements of a single call: case a's Python-side overhead in a hot loop
(``small_call_overhead``) and the peak memory of one call (``peak_memory``, ``--memory``).
"""

import os
import time

import numpy as np

import pypto

from .cases import CASES, Case


def small_call_overhead(torch=None, calls=2000):
    """Case a in a hot loop: the whole call, the kernel alone, and torch fp32's call (µs)."""
    from pypto._core.rules import validate_conv_backward_input
    from pypto._kernels import dispatch as _cpu

    case = Case("a", CASES["a"], pypto.DT_FP16, np.random.default_rng(0))
    p = case.problem
    dy, w = pypto.from_numpy(case.dy), pypto.from_numpy(case.w)
    args = (dy, case.input_size, w, pypto.DT_FP16, *case.attrs)
    tiles = pypto.suggest_convbp_input_tile_shapes(
        [p.n, p.cout, p.hout, p.wout],
        [p.cout, p.cin, p.kh, p.kw],
        case.input_size,
        pypto.DT_FP16,
        *case.attrs,
    )
    out = np.empty(case.input_size, case.dy.dtype)

    def best_us(fn):
        for _ in range(calls // 10):
            fn()
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(calls // 5):
                fn()
            best = min(best, (time.perf_counter() - start) / (calls // 5) * 1e6)
        return best

    with pypto.options(convbp_tile_shapes=tiles, vec_tile_shapes=[16, 16, 16, 16], num_threads=1):
        call = validate_conv_backward_input(*args)
        kernel_tiles = call.tiling.kernel_tiles(p)
        full = best_us(lambda: pypto.conv_backward_input(*args))
        kernel = best_us(
            lambda: _cpu._kernel().dgrad(
                case.dy,  # as the CPU backend hands them over: no copy, no view
                case.w,
                out,
                0,
                (p.sh, p.sw, p.pt, p.pl, p.dh, p.dw),
                kernel_tiles,
                (16, 16),
                1,
            )
        )
    print(
        f"\nsmall call (case a, fp16, 1 thread, hot loop): {full:.1f} us per call; kernel "
        f"{kernel:.1f} us; Python-side overhead (validation, dispatch, allocation) "
        f"{full - kernel:.1f} us"
    )
    if torch is not None:
        torch.set_num_threads(1)
        tdy = torch.from_numpy(case.dy.astype(np.float32))
        tw = torch.from_numpy(case.w.astype(np.float32))
        x = torch.empty(case.input_size)
        t = best_us(
            lambda: torch.ops.aten.convolution_backward(
                tdy, x, tw, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, False, False]
            )
        )
        print(f"torch fp32 call: {t:.1f} us; pypto / torch fp32 = {full / t:.2f}")


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_memory(name="j", dtype=pypto.DT_BF16):
    """Peak RSS growth during one pypto call on a case (Linux), next to its data sizes.

    A sampling thread reads the resident size every 0.2 ms while the kernel runs (it releases
    the GIL); the growth over the resident size just before the call is what the call added.
    """
    import threading

    case = Case(name, CASES[name], dtype, np.random.default_rng(0))
    p = case.problem
    tiles = pypto.suggest_convbp_input_tile_shapes(
        [p.n, p.cout, p.hout, p.wout],
        [p.cout, p.cin, p.kh, p.kw],
        case.input_size,
        dtype,
        *case.attrs,
    )
    run = case.pypto_runner(tiles)
    out_bytes = p.n * p.cin * p.hin * p.win * 2
    peak, done = [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss_bytes())
            time.sleep(0.0002)

    before = _rss_bytes()
    sampler = threading.Thread(target=sample)
    sampler.start()
    result = run()
    done.set()
    sampler.join()
    del result
    mib = 1 << 20
    print(
        f"case {name}: inputs {(case.dy.nbytes + case.w.nbytes) / mib:.1f} MiB, output "
        f"{out_bytes / mib:.1f} MiB; resident memory grew by at most "
        f"{(peak[0] - before) / mib:.1f} MiB during the call (output, weight panels, per-thread "
        f"tile scratch); a full im2col would be {p.n * p.gemm_k * p.hin * p.win * 4 / mib:.0f} MiB"
    )
