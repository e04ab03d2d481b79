"""The two runs: the layer cases (``run``) and the networks' backward-data passes
(``run_networks``), each timing pypto against its peers and printing a row per measurement.
"""

import sys

import numpy as np

import pypto
from pypto import pypto_impl
from pypto._kernels.dispatch import kernel_info

from .cases import CASES, SPEC_TILES, Case, default_orders
from .networks import NETWORKS
from .peers import _import_torch, _numpy_blas_note
from .report import _machine, _orders_note, _progress, _report_network
from .timing import (
    _measure_and_print_peaks,
    _median_times,
    _peak_for,
    _remeasure_peaks,
    _set_threads,
)


def _start(orders, thread_counts, with_torch, with_numpy, kernel_details):
    """The header both runs print before their rows (the machine, what the peers run, pypto's
    level and sum orders, the measured peaks); returns (torch or None, the peaks).
    ``kernel_details``: the micro-kernel, the bf16 dot product and OpenMP too."""
    info = kernel_info()
    torch, torch_note = _import_torch(info, with_torch)
    print(f"machine: {_machine()}")
    if torch_note:
        print(torch_note)
    if with_numpy:
        print(_numpy_blas_note())
    kernel = (
        f"; micro-kernel {info['mr']}x{info['nr']}, bf16 dot product "
        f"{'yes' if info['bf16_dot'] else 'no'}), OpenMP {'on' if info['openmp'] else 'off'}"
        if kernel_details
        else ")"
    )
    print(
        f"pypto {pypto.__version__}: ISA {info['isa']} ({info['reason']}{kernel}; "
        f"torch {torch.__version__ if torch else '-'}"
    )
    print(_orders_note(orders, info))
    return torch, _measure_and_print_peaks(info, thread_counts)


def run(
    cases, dtypes, thread_counts, rounds, budget_s, with_torch=True, with_numpy=True, orders=None
):
    """Run the suite; returns a list of result rows (dicts) and prints the table. ``orders``:
    the bf16 summation orders to time (default: ``default_orders()``), the first as "pypto"."""
    orders = orders or default_orders()
    torch, peaks = _start(orders, thread_counts, with_torch, with_numpy, kernel_details=True)
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


def run_networks(
    names, dtypes, thread_counts, rounds, budget_s, batch=None, with_torch=True, orders=None
):
    """The whole backward-data pass of each network (``networks.NETWORKS``): every layer timed
    as one call (pypto with its suggested tiles, torch in the storage dtype and upcast), times
    its count. Prints per network and setting the total against torch's faster path per layer
    and the ten layers slowest relative to torch; returns the rows (one per layer and setting).
    bf16 runs each of ``orders`` (default ``default_orders()``): the first is "pypto", each
    other a total of its own."""
    orders = orders or default_orders()
    torch, peaks = _start(orders, thread_counts, with_torch, False, kernel_details=False)
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
        if net is work[0][0] and dtype == work[0][1]:
            # as run() does: a peak taken while torch's threads still spun after its start
            # read 234 GFLOP/s for two threads whose own loop reaches 457 (Zen 4)
            _remeasure_peaks(peaks, [])
        for threads in thread_counts:
            _report_network(net, n, dtype_name, threads, peaks, layer_rows)
    pypto.set_num_threads(None)
    return rows, peaks
