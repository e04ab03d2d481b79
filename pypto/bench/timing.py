"""How the benchmark measures: medians of interleaved timing blocks, the thread count set for pypto
and its peers alike, and the measured peaks the rows are shares of.
"""

import statistics
import time

import pypto
from pypto._kernels.dispatch import measure_peak_gflops


def _median_times(runners, rounds, budget_s, pause_s=0.15, block=3):
    """Median call time of each runner, measured in short blocks taken round-robin.

    Before each block the process idles for ``pause_s``: OpenBLAS and OpenMP runtimes keep
    their worker threads spinning for a while after a call (OpenBLAS about 2^28 cycles), and
    those spinning threads would otherwise steal the cores of whichever runner comes next.
    Each block starts with one untimed call. A runner past ``budget_s`` of timed calls (and
    with at least 3 of them) takes no further blocks.
    """
    times = {name: [] for name in runners}
    for _ in range(max(1, -(-rounds // block))):
        for name, run in runners.items():
            if len(times[name]) >= 3 and sum(times[name]) > budget_s:
                continue
            time.sleep(pause_s)
            run()
            for _ in range(block):
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def _set_threads(torch, n):
    pypto.set_num_threads(n)
    if torch is not None:
        torch.set_num_threads(n)
    try:  # NumPy's BLAS threads can only be changed at run time through threadpoolctl
        from threadpoolctl import threadpool_limits

        threadpool_limits(n)
    except ImportError:
        pass  # the NumPy peer then uses OpenBLAS's own thread count at every setting


def _measure_and_print_peaks(info, thread_counts):
    peaks = measure_peaks(thread_counts)
    for t, peak in peaks.items():
        dot = f", bf16 dot {peak['bf16_dot']:.0f}" if peak["bf16_dot"] else ""
        print(
            f"measured peak of level {info['isa']} on {t} thread(s): fp32 multiply-add "
            f"{peak['fp32']:.0f}{dot} GFLOP/s"
        )
    return peaks


def measure_peaks(thread_counts):
    """{threads: {"fp32": GFLOP/s, "bf16_dot": GFLOP/s or None}} of the level in use."""
    return {
        t: {"fp32": measure_peak_gflops(t), "bf16_dot": measure_peak_gflops(t, "bf16_dot")}
        for t in thread_counts
    }


def _remeasure_peaks(peaks, rows):
    """Measure the peaks again after the cases and keep the higher of each pair: a peak is a
    ceiling, and a busy host can only pull one measurement below it (seen: 79 GFLOP/s against
    97 on a shared 2-vCPU host). The rows' peak shares then use the kept peaks."""
    again = measure_peaks(list(peaks))
    for t, peak in peaks.items():
        for kind, value in again[t].items():
            if value is not None and value > peak[kind]:
                peak[kind] = value
        dot = (
            f"; bf16 dot {again[t]['bf16_dot']:.0f}, kept {peak['bf16_dot']:.0f}"
            if peak["bf16_dot"]
            else ""
        )
        print(
            f"peak of {t} thread(s) measured again after the cases: fp32 multiply-add "
            f"{again[t]['fp32']:.0f} GFLOP/s, kept {peak['fp32']:.0f}{dot}"
        )
    for row in rows:
        row["peak_gflops"], row["peak_kind"] = _peak_for(peaks, row["dtype"], row["threads"])
        row["peak_pct"] = 100 * row["gflops"] / row["peak_gflops"]


def _peak_for(peaks, dtype_name, threads):
    """(GFLOP/s, what) of the peak a dtype's kernel can reach: the bf16 dot product for bf16 on
    a level that has it, else the fp32 multiply-add (both dtypes widen to fp32 there)."""
    dot = peaks[threads]["bf16_dot"]
    if dtype_name == "bf16" and dot:
        return dot, "bf16 dot"
    return peaks[threads]["fp32"], "fp32 multiply-add"
