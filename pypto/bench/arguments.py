"""The command line's arguments: the argparse types and ``parse_args``, which checks every value
(the output paths included) before any case runs.
"""

import argparse
import math
import os

import pypto
from pypto._core.options import MAX_THREADS, SUM_ORDERS
from pypto._dtypes import DTYPE_NAMES

from .cases import CASES
from .networks import NETWORKS

# the first line of the package's docstring: what ``--help`` says the benchmark is
_DESCRIPTION = "Benchmark conv_backward_input against PyTorch and NumPy: ``python -m pypto.bench``."


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
    parser = argparse.ArgumentParser(prog="python -m pypto.bench", description=_DESCRIPTION)
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
        help="timed calls per runner (>= 1; default 15, with --networks 9)",
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
        "force, and the other beside it where this CPU has the AMX tile unit)",
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
        # --networks: three blocks of calls (timing.py), so that one block whose calls all ran
        # slow cannot move the median; with two, such a block (3% of them on a 2-vCPU VM) set
        # half of it: a YOLOv5s 1x1 layer 0.76 -> 8.5 ms, an Inception-v3 one 1.75 -> 16 ms
        args.rounds = 9 if args.networks else 15
    if args.budget is None:
        args.budget = 1.0 if args.networks else 6.0
    # the output paths before the run: a typo must not cost minutes of measurements
    if not args.memory:
        for path, error in ((args.json, _json_path_error), (args.plot, _plot_path_error)):
            message = None if path is None else error(path)
            if message is not None:
                parser.error(message)
    return args
