"""Benchmark conv_backward_input against PyTorch and NumPy: ``python -m pypto.bench``.

Every case runs pypto and its peers interleaved in one process (median of repeated calls, timed in
short blocks taken round-robin with an idle pause before each) for fp16 and bf16 at 1 and 2 threads,
and prints ms, GFLOP/s (2*N*Cin*Cout*Kh*Kw*Hout*Wout / t), the ratio of each peer's time to pypto's
(> 1: pypto is faster) and the share of the peak of the kernel level in use, measured on this
machine at each thread count before the cases run (a register-resident multiply-add loop, or the
bf16 dot product where the level has it; ``pypto._kernels.dispatch.measure_peak_gflops``). Peers,
when torch is installed: torch ``aten.convolution_backward`` in the storage dtype ("torch bf16" /
"torch fp16") and upcast ("... upcast": dy and w to fp32, fp32 dgrad, result rounded back: what a
user of a CPU without fast 16-bit paths does), and "torch best", the faster of the two in each
measurement, which is what the targets compare against; NumPy GEMM + col2im in fp32. pypto uses the
tiles ``suggest_convbp_input_tile_shapes`` returns; case a also runs with the specification's tiles.
"""

import argparse
import math
import os
import platform
import statistics
import sys
import time

import numpy as np

import pypto
from pypto import pypto_impl
from pypto._core.options import MAX_THREADS, SUM_ORDERS
from pypto._core.shapes import forward_out_size
from pypto._core.tiling import ConvProblem
from pypto._dtypes import DTYPE_NAMES, numpy_dtype
from pypto._golden.reference import dgrad_gemm_col2im
from pypto._kernels.dispatch import kernel_info, measure_peak_gflops

from .networks import NETWORKS

# name: (N, Cin, Cout, Hin, Win, Kh, Kw, stride, pad, dilation)
CASES = {
    "a": (1, 16, 16, 5, 32, 3, 3, 1, 1, 1),
    "b": (8, 64, 64, 56, 56, 3, 3, 1, 1, 1),
    "c": (8, 128, 128, 28, 28, 3, 3, 1, 1, 1),
    "d": (8, 256, 256, 14, 14, 3, 3, 1, 1, 1),
    "e": (8, 512, 512, 7, 7, 3, 3, 1, 1, 1),
    "f": (8, 64, 256, 56, 56, 1, 1, 1, 0, 1),
    "g": (8, 128, 64, 56, 56, 3, 3, 2, 1, 1),
    "h": (8, 3, 64, 224, 224, 7, 7, 2, 3, 1),
    "i": (4, 64, 64, 64, 64, 3, 3, 1, 2, 2),
    "j": (1, 256, 256, 64, 64, 5, 5, 1, 2, 1),
}
SPEC_TILES = ((16, 144, 16), (16, 16, 16))


class Case:
    """One benchmark problem with its data and every runner."""

    def __init__(self, name, params, dtype, rng):
        """``params``: a ConvProblem, or a CASES entry (square strides, pads, dilations)."""
        if isinstance(params, ConvProblem):
            problem = params
        else:
            n, cin, cout, hin, win, kh, kw, s, p, d = params
            hout = forward_out_size(hin, kh, s, p, p, d)
            wout = forward_out_size(win, kw, s, p, p, d)
            problem = ConvProblem(
                n, cin, cout, hin, win, hout, wout, kh, kw, s, s, p, p, p, p, d, d
            )
        self.name, self.dtype, self.problem = name, dtype, problem
        q = problem
        np_dtype = numpy_dtype(dtype)
        self.dy = rng.uniform(-1, 1, (q.n, q.cout, q.hout, q.wout)).astype(np_dtype)
        self.w = rng.uniform(-1, 1, (q.cout, q.cin, q.kh, q.kw)).astype(np_dtype)
        self.attrs = ([q.sh, q.sw], [q.pt, q.pb, q.pl, q.pr], [q.dh, q.dw])
        self.input_size = [q.n, q.cin, q.hin, q.win]

    def suggested_tiles(self):
        p = self.problem
        return pypto.suggest_convbp_input_tile_shapes(
            [p.n, p.cout, p.hout, p.wout],
            [p.cout, p.cin, p.kh, p.kw],
            self.input_size,
            self.dtype,
            *self.attrs,
        )

    def pypto_runner(self, tiles, sum_order=None):
        """pypto with ``tiles``, in ``sum_order`` (None: the order in force)."""
        l1, l0 = tiles
        dy, w = pypto.from_numpy(self.dy), pypto.from_numpy(self.w)
        order = {} if sum_order is None else {"sum_order": sum_order}

        def run():
            return pypto.conv_backward_input(dy, self.input_size, w, self.dtype, *self.attrs)

        def with_tiles():
            with pypto.options(
                convbp_tile_shapes=(l1, l0), vec_tile_shapes=[1, 16, 1, 64], **order
            ):
                return run()

        return with_tiles

    def pypto_runners(self, tiles, orders):
        """{"pypto": the first of ``orders``, "pypto <order>": each other} for bf16; fp16,
        which sums in one order, gets "pypto" alone."""
        if self.dtype != pypto.DT_BF16:
            return {"pypto": self.pypto_runner(tiles)}
        return {
            ("pypto" if i == 0 else f"pypto {order}"): self.pypto_runner(tiles, order)
            for i, order in enumerate(orders)
        }

    def torch_runner(self, torch, compute_dtype, out_dtype):
        s, p, d = self.attrs[0], self.attrs[1][::2], self.attrs[2]
        bits = self.dy.view(np.uint16), self.w.view(np.uint16)
        storage = torch.bfloat16 if self.dtype == pypto.DT_BF16 else torch.float16
        dy = torch.from_numpy(bits[0].view(np.int16)).view(storage)
        w = torch.from_numpy(bits[1].view(np.int16)).view(storage)
        x = torch.empty(self.input_size, dtype=compute_dtype)
        if compute_dtype == storage:

            def run():
                return torch.ops.aten.convolution_backward(
                    dy, x, w, None, s, p, d, False, [0, 0], 1, [True, False, False]
                )[0]
        else:

            def run():  # upcast, compute, round the result back to the storage type
                return torch.ops.aten.convolution_backward(
                    dy.to(compute_dtype),
                    x,
                    w.to(compute_dtype),
                    None,
                    s,
                    p,
                    d,
                    False,
                    [0, 0],
                    1,
                    [True, False, False],
                )[0].to(out_dtype)

        return run

    def numpy_runner(self):
        dy32, w32 = self.dy.astype(np.float32), self.w.astype(np.float32)
        hw = self.input_size[2:]

        def run():
            return dgrad_gemm_col2im(dy32, w32, hw, *self.attrs, dtype=np.float32)

        return run


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


def _progress(done, total, what):
    """A progress bar on stderr (the table goes to stdout, so redirecting it stays clean)."""
    width = 30
    filled = width * done // total
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what:<40}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                # x86: "model name"; AArch64 kernels name the part only ("CPU part")
                if line.startswith(("model name", "Model name", "CPU part")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _machine():
    return f"{_cpu_model()}, {os.cpu_count()} CPUs, {platform.machine()}"


# torch's CPU kernels (oneDNN, MKL) pick their own ISA: with pypto forced to a lower level
# (PYPTO_CPU_ISA), cap them to the same one, or the comparison is of two different machines.
_TORCH_ISA_CAPS = {
    "avx2": ("AVX2", "AVX2"),
    "avx512": ("AVX512_CORE", "AVX512"),
    "baseline": ("SSE41", "SSE4_2"),
}


def _cap_torch_to_level(level):
    """Set ONEDNN_MAX_CPU_ISA / MKL_ENABLE_INSTRUCTIONS for a forced level (before torch is
    imported; a caller's own settings win); returns what was done, or None."""
    # the caps are x86 ISA names; on AArch64 there is one level and nothing to cap
    if (
        level not in _TORCH_ISA_CAPS
        or not os.environ.get("PYPTO_CPU_ISA")
        or platform.machine() not in ("x86_64", "AMD64")
    ):
        return None
    if "torch" in sys.modules:
        return f"torch was imported before the benchmark: not capped to pypto's level {level}"
    onednn, mkl = _TORCH_ISA_CAPS[level]
    os.environ.setdefault("ONEDNN_MAX_CPU_ISA", onednn)
    os.environ.setdefault("MKL_ENABLE_INSTRUCTIONS", mkl)
    return (
        f"torch capped to pypto's level {level}: ONEDNN_MAX_CPU_ISA="
        f"{os.environ['ONEDNN_MAX_CPU_ISA']}, MKL_ENABLE_INSTRUCTIONS="
        f"{os.environ['MKL_ENABLE_INSTRUCTIONS']}"
    )


def _torch_note(info):
    """What torch's oneDNN may run here, set before torch's import: capped to pypto's forced
    level, or where it has AMX; None otherwise."""
    capped = _cap_torch_to_level(info["isa"])
    if capped or "amx_bf16" not in info["cpu_features"]:
        return capped
    return (
        "torch multiplies bf16 on this CPU's AMX tiles in their own order; pypto does so in "
        "sum_order 'tile' (the same order on every CPU), and sums sequentially otherwise "
        + ("(its rows: 'pypto tile' / 'pypto')" if info["amx"] else "(not on this level)")
    )


def _numpy_blas_note():
    """What the NumPy peer's BLAS runs: numpy is imported before the benchmark starts, so its
    OpenBLAS kernel can only be capped from the environment (OPENBLAS_CORETYPE)."""
    core = os.environ.get("OPENBLAS_CORETYPE")
    if core:
        return f"numpy's OpenBLAS: OPENBLAS_CORETYPE={core}"
    return (
        "numpy's OpenBLAS: not capped (its best kernel for this CPU; start with "
        "OPENBLAS_CORETYPE=Haswell to hold it to AVX2)"
    )


def _import_torch(with_torch):
    if not with_torch:
        return None
    try:
        import torch
    except ImportError:
        print("torch not installed: PyTorch peers skipped")
        return None
    return torch


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


def default_orders():
    """The bf16 orders a run times: the order in force, and "tile" beside it where this
    level has the AMX tile unit (the order it runs natively)."""
    first = pypto.get_sum_order("bf16")
    return [first] + (["tile"] if kernel_info()["amx"] and first != "tile" else [])


def _orders_note(orders, info):
    return (
        f"bf16 sum order: {orders[0]} (pypto)"
        + "".join(f", {order} (pypto {order})" for order in orders[1:])
        + f"; fp16 sums sequentially; order 'tile' here: {info['tile_unit']}"
    )


def run(
    cases, dtypes, thread_counts, rounds, budget_s, with_torch=True, with_numpy=True, orders=None
):
    """Run the suite; returns a list of result rows (dicts) and prints the table. ``orders``:
    the bf16 summation orders to time (default: ``default_orders()``), the first as "pypto"."""
    orders = orders or default_orders()
    info = kernel_info()
    torch_note = _torch_note(info) if with_torch else None
    torch = _import_torch(with_torch)
    print(f"machine: {_machine()}")
    if torch_note:
        print(torch_note)
    if with_numpy:
        print(_numpy_blas_note())
    print(
        f"pypto {pypto.__version__}: ISA {info['isa']} ({info['reason']}; micro-kernel "
        f"{info['mr']}x{info['nr']}, bf16 dot product {'yes' if info['bf16_dot'] else 'no'}), "
        f"OpenMP {'on' if info['openmp'] else 'off'}; torch {torch.__version__ if torch else '-'}"
    )
    print(_orders_note(orders, info))
    peaks = _measure_and_print_peaks(info, thread_counts)
    header = (
        f"{'case':<5}{'dtype':<6}{'thr':>4}  {'peer':<18}{'ms':>10}{'GFLOP/s':>10}"
        f"{'peer/pypto':>11}{'%peak':>7}"
    )
    print(header)
    print("-" * len(header))
    rng = np.random.default_rng(0)
    rows = []
    total, done = len(cases) * len(dtypes) * len(thread_counts), 0
    for name in cases:
        for dtype in dtypes:
            case = Case(name, CASES[name], dtype, rng)
            p = case.problem
            runners = case.pypto_runners(case.suggested_tiles(), orders)
            if name == "a":
                runners["pypto spec tiles"] = case.pypto_runner(
                    (
                        pypto_impl.ConvBpTileL1Info(*SPEC_TILES[0]),
                        pypto_impl.ConvBpTileL0Info(*SPEC_TILES[1]),
                    )
                )
            dtype_name = "bf16" if dtype == pypto.DT_BF16 else "fp16"
            if torch is not None:
                storage = torch.bfloat16 if dtype == pypto.DT_BF16 else torch.float16
                runners[f"torch {dtype_name}"] = case.torch_runner(torch, storage, storage)
                runners[f"torch {dtype_name} upcast"] = case.torch_runner(
                    torch, torch.float32, storage
                )
            if with_numpy:
                runners["numpy fp32"] = case.numpy_runner()
            for threads in thread_counts:
                done += 1
                _progress(done, total, f"case {name} {dtype.name[3:].lower()} {threads} thread(s)")
                _set_threads(torch, threads)
                medians = _median_times(runners, rounds, budget_s)
                if torch is not None:  # what a user would pick: the faster torch path
                    medians["torch best"] = min(
                        medians[f"torch {dtype_name}"], medians[f"torch {dtype_name} upcast"]
                    )
                peak, peak_kind = _peak_for(peaks, dtype_name, threads)
                for peer, seconds in medians.items():
                    gflops = p.flops / seconds / 1e9
                    row = {
                        "case": name,
                        "dtype": dtype_name,
                        "threads": threads,
                        "peer": peer,
                        "ms": seconds * 1e3,
                        "gflops": gflops,
                        "ratio": seconds / medians["pypto"],
                        "peak_gflops": peak,
                        "peak_kind": peak_kind,
                        "peak_pct": 100 * gflops / peak,
                    }
                    rows.append(row)
                    print(
                        f"{name:<5}{row['dtype']:<6}{threads:>4}  {peer:<18}{row['ms']:>10.3f}"
                        f"{gflops:>10.1f}{row['ratio']:>11.2f}{row['peak_pct']:>7.1f}"
                    )
                sys.stdout.flush()
    pypto.set_num_threads(None)
    _remeasure_peaks(peaks, rows)
    return rows, peaks


def summarize_peak_shares(rows):
    """pypto's GFLOP/s and share of the kept peak, a line per case, a column per dtype and
    thread count (the table above printed each share against the first measurement)."""
    mine = {(r["case"], r["dtype"], r["threads"]): r for r in rows if r["peer"] == "pypto"}
    if not mine:
        return
    columns = sorted({(d, t) for _, d, t in mine}, key=lambda c: (c[1], c[0]))
    print("\npypto GFLOP/s (% of the kept peak):")
    print("case" + "".join(f"{f'{d} {t}t':>16}" for d, t in columns))
    for name in dict.fromkeys(c for c, _, _ in mine):
        cells = []
        for d, t in columns:
            r = mine.get((name, d, t))
            cells.append(f"{r['gflops']:.1f} ({r['peak_pct']:.0f}%)" if r else "-")
        print(f"{name:<4}" + "".join(f"{c:>16}" for c in cells))


def summarize(rows):
    """Geometric means of peer/pypto time ratios over cases b..j, per dtype, threads and peer."""
    groups = {}
    for r in rows:
        if r["case"] != "a" and not r["peer"].startswith("pypto"):
            groups.setdefault((r["dtype"], r["threads"], r["peer"]), []).append(r["ratio"])
    if groups:
        print("\ngeometric mean of peer time / pypto time over the cases run (b..j):")
    for (dtype, threads, peer), ratios in sorted(groups.items()):
        gm = float(np.exp(np.mean(np.log(ratios))))
        print(f"  {dtype} {threads} thread(s) vs {peer:<18} {gm:6.2f}x  (min {min(ratios):.2f}x)")
    # the other bf16 orders ("pypto tile"): the same means against their own times
    ms = {(r["case"], r["dtype"], r["threads"], r["peer"]): r["ms"] for r in rows}
    others = sorted(
        {r["peer"] for r in rows if r["peer"].startswith("pypto ") and r["case"] != "a"}
    )
    for order in others:
        if order == "pypto spec tiles":
            continue
        print(f"\ngeometric mean of peer time / {order} time over the cases run (b..j):")
        for (dtype, threads, peer), _ in sorted(groups.items()):
            ratios = [
                ms[(c, d, t, peer)] / ms[(c, d, t, order)]
                for (c, d, t, p) in ms
                if p == order and (d, t) == (dtype, threads) and (c, d, t, peer) in ms
            ]
            if ratios:
                gm = float(np.exp(np.mean(np.log(ratios))))
                print(
                    f"  {dtype} {threads} thread(s) vs {peer:<18} {gm:6.2f}x  "
                    f"(min {min(ratios):.2f}x)"
                )


def run_networks(
    names, dtypes, thread_counts, rounds, budget_s, batch=None, with_torch=True, orders=None
):
    """The whole backward-data pass of each network (``networks.NETWORKS``): every layer timed
    as one call (pypto with its suggested tiles, torch in the storage dtype and upcast), times
    its count. Prints per network and setting the total against torch's faster path per layer
    and the ten layers slowest relative to torch; returns the rows (one per layer and setting).
    bf16 runs each of ``orders`` (default ``default_orders()``): the first is "pypto", each
    other a total of its own."""
    from .networks import NETWORKS

    orders = orders or default_orders()
    info = kernel_info()
    torch_note = _torch_note(info) if with_torch else None
    torch = _import_torch(with_torch)
    print(f"machine: {_machine()}")
    if torch_note:
        print(torch_note)
    print(
        f"pypto {pypto.__version__}: ISA {info['isa']} ({info['reason']}); "
        f"torch {torch.__version__ if torch else '-'}"
    )
    print(_orders_note(orders, info))
    peaks = _measure_and_print_peaks(info, thread_counts)
    rng = np.random.default_rng(0)
    rows = []
    work = [(NETWORKS[name], d) for name in names for d in dtypes]
    total = sum(len(net.layers) for net, _ in work) * len(thread_counts)
    done = 0
    for net, dtype in work:
        n = batch or net.batch
        dtype_name = "bf16" if dtype == pypto.DT_BF16 else "fp16"
        layer_rows = []
        for layer in net.layers:
            case = Case(layer.name, layer.problem(n), dtype, rng)
            runners = case.pypto_runners(case.suggested_tiles(), orders)
            if torch is not None:
                storage = torch.bfloat16 if dtype == pypto.DT_BF16 else torch.float16
                runners["torch"] = case.torch_runner(torch, storage, storage)
                runners["torch upcast"] = case.torch_runner(torch, torch.float32, storage)
            for threads in thread_counts:
                done += 1
                _progress(done, total, f"{net.name} {dtype_name} {threads}t {layer.name[:24]}")
                _set_threads(torch, threads)
                medians = _median_times(runners, rounds, budget_s)
                p = case.problem
                row = {
                    "network": net.name,
                    "batch": n,
                    "layer": layer.name,
                    "count": layer.count,
                    "shape": f"{p.cin}<-{p.cout} {p.hin}x{p.win} {p.kh}x{p.kw}/{p.sh}",
                    "dtype": dtype_name,
                    "threads": threads,
                    "flops": p.flops,
                    "pypto_ms": medians["pypto"] * 1e3,
                    "sum_order": orders[0] if dtype == pypto.DT_BF16 else "sequential",
                }
                for peer in medians:  # the other bf16 orders
                    if peer.startswith("pypto "):
                        row[f"pypto_{peer[6:]}_ms"] = medians[peer] * 1e3
                if torch is not None:
                    row["torch_ms"] = medians["torch"] * 1e3
                    row["torch_upcast_ms"] = medians["torch upcast"] * 1e3
                    row["torch_best_ms"] = min(row["torch_ms"], row["torch_upcast_ms"])
                    row["ratio"] = row["torch_best_ms"] / row["pypto_ms"]
                layer_rows.append(row)
        rows += layer_rows
        for threads in thread_counts:
            _report_network(net, n, dtype_name, threads, peaks, layer_rows)
    pypto.set_num_threads(None)
    return rows, peaks


def _report_network(net, batch, dtype_name, threads, peaks, layer_rows):
    mine = [r for r in layer_rows if r["threads"] == threads]
    pypto_ms = sum(r["count"] * r["pypto_ms"] for r in mine)
    flops = sum(r["count"] * r["flops"] for r in mine)
    peak, peak_kind = _peak_for(peaks, dtype_name, threads)
    print(
        f"\n{net.name}, batch {batch}, {dtype_name}, {threads} thread(s): "
        f"{sum(r['count'] for r in mine)} convolutions ({len(mine)} distinct), "
        f"{flops / 1e9:.1f} GFLOP; source: {net.source}"
    )
    gflops = flops / pypto_ms / 1e6
    share = 100 * gflops / peak
    line = (
        f"  pypto ({mine[0]['sum_order']}) {pypto_ms:.1f} ms ({gflops:.0f} GFLOP/s, {share:.0f}% "
        f"of {peak_kind} peak)"
    )
    others = {}  # the other bf16 orders' totals
    for key in mine[0]:
        if key.startswith("pypto_") and key.endswith("_ms") and key != "pypto_ms":
            others[key[6:-3]] = sum(r["count"] * r[key] for r in mine)
    if "ratio" not in mine[0]:
        print(line)
        for order, ms in others.items():
            print(f"  pypto ({order}) {ms:.1f} ms")
        return
    torch_ms = sum(r["count"] * r["torch_best_ms"] for r in mine)
    print(
        f"{line}; torch's faster path per layer {torch_ms:.1f} ms: ratio {torch_ms / pypto_ms:.2f}x"
    )
    for order, ms in others.items():
        print(f"  pypto ({order}) {ms:.1f} ms: ratio to torch {torch_ms / ms:.2f}x")
    slow = sorted(mine, key=lambda r: r["ratio"])[:10]
    print("  ten slowest layers relative to torch:")
    print(
        f"  {'layer':<34}{'shape':<26}{'count':>6}{'pypto ms':>10}{'torch ms':>10}"
        f"{'ratio':>7}{'share':>7}"
    )
    for r in slow:
        share = 100 * r["count"] * r["pypto_ms"] / pypto_ms
        print(
            f"  {r['layer'][:33]:<34}{r['shape']:<26}{r['count']:>6}{r['pypto_ms']:>10.3f}"
            f"{r['torch_best_ms']:>10.3f}{r['ratio']:>7.2f}{share:>6.1f}%"
        )
    heavy_slow = [
        r for r in mine if r["ratio"] < 0.9 and r["count"] * r["pypto_ms"] > 0.02 * pypto_ms
    ]
    print(
        "  layers over 2% of the time below 0.9x: "
        + (", ".join(f"{r['layer']} ({r['ratio']:.2f}x)" for r in heavy_slow) or "none")
    )


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


def write_json(path, rows, peaks, argv):
    """All measured rows plus the machine (CPU model, level, features), the measured peaks,
    the kernel and the command, as JSON."""
    import json

    info = kernel_info()
    machine = {
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "arch": platform.machine(),
        "level": info["isa"],
        "level_reason": info["reason"],
        "cpu_features": info["cpu_features"],
        "numpy_blas": _numpy_blas_note(),
    }
    with open(path, "w") as f:
        json.dump(
            {
                "machine": machine,
                "pypto": pypto.__version__,
                "kernel": info,
                "peak_gflops": {str(t): v for t, v in peaks.items()},
                "command": argv,
                "cases": CASES,
                "rows": rows,
            },
            f,
            indent=1,
        )
    print(f"results written to {path}")


def write_plot(path, rows):
    """GFLOP/s per case, pypto against each peer, one panel per dtype and thread count, with
    the machine's peak marked. Needs matplotlib."""
    from pypto._golden.localise import check_plot_path

    path, fmt = check_plot_path(path)  # a PyptoError when matplotlib is missing
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["dtype"], r["threads"]) for r in rows})
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3.6 * len(panels)), squeeze=False)
    info = kernel_info()
    for ax, (dtype, threads) in zip(axes[:, 0], panels):
        sel = [r for r in rows if r["dtype"] == dtype and r["threads"] == threads]
        cases = sorted({r["case"] for r in sel})
        peers = ["pypto"] + sorted({r["peer"] for r in sel} - {"pypto"})
        width = 0.8 / len(peers)
        # pypto alone in red; peers in colours that never repeat it
        palette = iter(
            [
                "tab:blue",
                "tab:green",
                "tab:orange",
                "tab:purple",
                "tab:gray",
                "tab:brown",
                "tab:olive",
                "tab:cyan",
            ]
        )
        for i, peer in enumerate(peers):
            values = {r["case"]: r["gflops"] for r in sel if r["peer"] == peer}
            xs = [c + (i - (len(peers) - 1) / 2) * width for c in range(len(cases))]
            ax.bar(
                xs,
                [values.get(c, 0) for c in cases],
                width,
                label=peer,
                color="tab:red" if peer == "pypto" else next(palette),
            )
        peak, kind = sel[0]["peak_gflops"], sel[0]["peak_kind"]  # measured on this machine
        ax.axhline(peak, color="black", linestyle="--", linewidth=1)
        ax.text(
            len(cases) - 0.5,
            peak,
            f"measured peak {peak:.0f} ({kind}, {info['isa']})",
            ha="right",
            va="bottom",
            fontsize=8,
        )
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(cases)
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"conv_backward_input, {dtype}, {threads} thread(s)")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"pypto {pypto.__version__} ({info['isa']}) on {_machine()}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format=fmt)
    print(f"plot written to {path}")


# --- the command line: every value is checked before any case runs -----------------------------
def _names(known, what):
    """argparse type: comma-separated names out of ``known``, in order, each once."""

    def parse(text):
        names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
        unknown = [n for n in names if n not in known]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {what}(s) {', '.join(unknown)}; known: {', '.join(known)}"
            )
        if not names:
            raise argparse.ArgumentTypeError(f"no {what} in {text!r}; known: {', '.join(known)}")
        return names

    return parse


def _thread_counts(text):
    """argparse type: comma-separated thread counts, each in [1, MAX_THREADS]."""
    counts = []
    for part in text.split(","):
        try:
            count = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated ints, got {text!r}"
            ) from None
        if not 1 <= count <= MAX_THREADS:
            raise argparse.ArgumentTypeError(
                f"a thread count must be in [1, {MAX_THREADS}], not {count}"
            )
        counts.append(count)
    return list(dict.fromkeys(counts))


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}")
    return value


def _seconds(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def _json_path_error(path):
    """Why the JSON results could not be written to ``path``, or None."""
    if not path.strip() or "\0" in path:
        return f"--json: {path!r} is no file name"
    if os.path.isdir(path):
        return f"--json: {path} is a folder; give a file name"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        return f"--json: cannot write {path}: {folder} is not a writable folder"
    return None


def _plot_path_error(path):
    """Why the plot could not be written to ``path`` (no matplotlib, a format it cannot
    write, no such folder), or None."""
    from pypto._golden.localise import check_plot_path

    try:
        check_plot_path(path)
    except pypto.PyptoError as exc:
        return f"--plot: {exc}"
    return None


def parse_args(argv=None):
    """The checked arguments; a bad one is argparse's usage error (exit 2) before any work."""
    parser = argparse.ArgumentParser(
        prog="python -m pypto.bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--cases",
        type=_names(list(CASES), "case"),
        default="a,b,c,d,e,f,g,h,i,j",
        help="comma-separated case names (default: all)",
    )
    parser.add_argument("--dtypes", type=_names(sorted(DTYPE_NAMES), "dtype"), default="bf16,fp16")
    parser.add_argument(
        "--threads",
        type=_thread_counts,
        default="1,2",
        help=f"comma-separated thread counts, each in [1, {MAX_THREADS}]",
    )
    parser.add_argument(
        "--rounds",
        type=_positive_int,
        default=None,
        help="timed calls per runner (>= 1; default 15, with --networks 5)",
    )
    parser.add_argument(
        "--budget",
        type=_seconds,
        default=None,
        help="seconds after which a slow runner stops repeating (>= 0; it "
        "still makes 3 timed calls; default 6, with --networks 1)",
    )
    parser.add_argument(
        "--networks",
        nargs="?",
        const=list(NETWORKS),
        type=_names(list(NETWORKS), "network"),
        metavar="NAMES",
        help="time the whole backward-data pass of real networks instead of the cases, layer "
        f"by layer (comma-separated; default all: {', '.join(NETWORKS)})",
    )
    parser.add_argument(
        "--batch",
        type=_positive_int,
        default=None,
        help="batch size for --networks (default: each network's own: "
        + ", ".join(f"{n} {net.batch}" for n, net in NETWORKS.items())
        + ")",
    )
    parser.add_argument(
        "--orders",
        type=_names(list(SUM_ORDERS), "sum order"),
        default=None,
        help="bf16 summation orders to time, the first as 'pypto' (default: the order in "
        "force, and 'tile' beside it where this CPU has the AMX tile unit)",
    )
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--json", metavar="PATH", help="write every measurement as JSON")
    parser.add_argument(
        "--plot",
        metavar="PATH",
        help="write a plot, PNG or the format of PATH's extension (needs matplotlib)",
    )
    parser.add_argument(
        "--memory", action="store_true", help="only report the peak memory of one call on case j"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a run under a minute: cases a, c, f at one thread, 3 rounds",
    )
    args = parser.parse_args(argv)
    if args.batch is not None and not args.networks:
        parser.error("--batch is for --networks")
    if args.networks and (args.plot or args.memory or args.quick):
        parser.error("--networks takes no --plot, --memory or --quick")
    if args.quick:
        args.cases, args.threads, args.rounds, args.budget = ["a", "c", "f"], [1], 3, 0.5
    if args.rounds is None:
        args.rounds = 5 if args.networks else 15
    if args.budget is None:
        args.budget = 1.0 if args.networks else 6.0
    # the output paths before the run: a typo must not cost minutes of measurements
    if not args.memory:
        for path, error in ((args.json, _json_path_error), (args.plot, _plot_path_error)):
            message = None if path is None else error(path)
            if message is not None:
                parser.error(message)
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.memory:
        peak_memory()
        return 0
    if args.networks:
        rows, peaks = run_networks(
            args.networks,
            [DTYPE_NAMES[d] for d in args.dtypes],
            args.threads,
            args.rounds,
            args.budget,
            batch=args.batch,
            with_torch=not args.no_torch,
            orders=args.orders,
        )
        if args.json is not None:
            try:
                write_json(args.json, rows, peaks, sys.argv if argv is None else argv)
            except OSError as exc:
                print(f"error: cannot write {args.json}: {exc}", file=sys.stderr)
                return 1
        return 0
    cases = args.cases
    rows, peaks = run(
        cases,
        [DTYPE_NAMES[d] for d in args.dtypes],
        args.threads,
        args.rounds,
        args.budget,
        with_torch=not args.no_torch,
        orders=args.orders,
    )
    summarize(rows)
    summarize_peak_shares(rows)
    # the paths were checked before the run; what fails now (a full disk, a folder removed
    # meanwhile) is one error line, and the rest of the output is still written
    status = 0
    if args.json is not None:
        try:
            write_json(args.json, rows, peaks, sys.argv if argv is None else argv)
        except OSError as exc:
            print(f"error: cannot write {args.json}: {exc}", file=sys.stderr)
            status = 1
    if args.plot is not None:
        try:
            write_plot(args.plot, rows)
        except (OSError, pypto.PyptoError) as exc:
            print(f"error: cannot write {args.plot}: {exc}", file=sys.stderr)
            status = 1
    if "a" in cases:
        torch = None
        if not args.no_torch:
            try:
                import torch
            except ImportError:
                pass
        small_call_overhead(torch, calls=200 if args.quick else 2000)
    return status
