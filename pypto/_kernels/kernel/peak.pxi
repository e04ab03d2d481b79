# The peak loop (pypto_peak.h) behind the benchmark's "% of peak": this level's widest
# multiply-add or the bf16 dot product, on several threads at once.

import time


def peak_flops(str kind, int threads, int64_t iterations):
    """(flops, seconds) of the peak loop (pypto_peak.h) on ``threads`` threads at once, each
    doing ``iterations`` steps: kind "madd" (fp32 multiply-add at this level's widest vector) or
    "bf16_dot" (0 flops on levels without the bf16 dot product). The caller checks arguments."""
    cdef int use_dot = kind == "bf16_dot"
    cdef int t
    cdef double total = 0.0
    start = time.perf_counter()
    with nogil:
        for t in prange(threads, num_threads=threads, schedule="static", chunksize=1):
            total += pypto_peak_bf16_dot(iterations) if use_dot else pypto_peak_madd(iterations)
    return total, time.perf_counter() - start
