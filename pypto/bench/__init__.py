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

The package, one module per concept: ``cases`` (the problems and their runners), ``peers``
(torch's and NumPy's setting), ``timing`` (medians, threads, peaks), ``suite`` (the two runs),
``one_call`` (one call's overhead and memory), ``report`` (summaries, JSON, plot), ``networks``
(the networks' layer tables), ``arguments`` (the command line, checked); ``main`` below runs what
the arguments ask for.
"""

import sys

import pypto
from pypto._dtypes import DTYPE_NAMES

from .arguments import parse_args
from .cases import CASES, SPEC_TILES, Case, default_orders
from .networks import NETWORKS
from .one_call import peak_memory, small_call_overhead
from .peers import _torch_note as _torch_note
from .report import summarize, summarize_peak_shares, write_json, write_plot
from .suite import run, run_networks
from .timing import _median_times as _median_times
from .timing import _remeasure_peaks as _remeasure_peaks
from .timing import measure_peaks

# the public names; the private ones imported "X as X" above stay here for the tools and tests
# that use them (tools/layer_ab.py, tests/cli/test_bench_smoke.py)
__all__ = [
    "CASES",
    "NETWORKS",
    "SPEC_TILES",
    "Case",
    "default_orders",
    "main",
    "measure_peaks",
    "parse_args",
    "peak_memory",
    "run",
    "run_networks",
    "small_call_overhead",
    "summarize",
    "summarize_peak_shares",
    "write_json",
    "write_plot",
]


def main(argv=None):
    """``python -m pypto.bench``: the run the arguments ask for; returns the exit status."""
    args = parse_args(argv)
    if args.memory:
        peak_memory()
        return 0
    dtypes = [DTYPE_NAMES[d] for d in args.dtypes]
    command = sys.argv if argv is None else argv
    if args.networks:
        rows, peaks = run_networks(
            args.networks,
            dtypes,
            args.threads,
            args.rounds,
            args.budget,
            batch=args.batch,
            with_torch=not args.no_torch,
            orders=args.orders,
        )
        return 0 if args.json is None else _write(args.json, write_json, rows, peaks, command)
    cases = args.cases
    rows, peaks = run(
        cases,
        dtypes,
        args.threads,
        args.rounds,
        args.budget,
        with_torch=not args.no_torch,
        orders=args.orders,
    )
    summarize(rows)
    summarize_peak_shares(rows)
    status = 0
    if args.json is not None:
        status |= _write(args.json, write_json, rows, peaks, command)
    if args.plot is not None:
        status |= _write(args.plot, write_plot, rows)
    if "a" in cases:
        torch = None
        if not args.no_torch:
            try:
                import torch
            except ImportError:
                pass
        small_call_overhead(torch, calls=200 if args.quick else 2000)
    return status


def _write(path, write, *args):
    """``write(path, *args)``; 1 if it failed, else 0. The paths were checked before the run:
    what fails now (a full disk, a folder removed meanwhile) is one error line, and the rest of
    the output is still written."""
    try:
        write(path, *args)
    except (OSError, pypto.PyptoError) as exc:
        print(f"error: cannot write {path}: {exc}", file=sys.stderr)
        return 1
    return 0
