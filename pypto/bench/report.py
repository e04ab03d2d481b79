"""What the benchmark prints and writes besides its rows: the machine line, the progress bar, the
summaries of the cases and of each network, the JSON results and the plot.
"""

import os
import platform
import sys

import numpy as np

import pypto
from pypto._kernels.dispatch import kernel_info

from .cases import CASES
from .peers import _numpy_blas_note
from .timing import _peak_for


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


def _orders_note(orders, info):
    return (
        f"bf16 sum order: {orders[0]} (pypto)"
        + "".join(f", {order} (pypto {order})" for order in orders[1:])
        + f"; fp16 sums sequentially; order 'tile' here: {info['tile_unit']}"
    )


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
