"""``sweep``: many cases from case files run into golden folders with one result row each
(``sweep CASES --out DIR``), shards merged (``--merge``), kernel outputs judged (``--judge``);
the sweep itself is ``pypto/_sweep/``."""

import argparse
import os
import sys
import time

import pypto
from pypto._golden.accuracy import DEFAULT_STANDARD, STANDARDS
from pypto._sweep.unit import KEEP
from pypto.error import FeError

from .args import positive, seconds

NAME = "sweep"


def _shard(text):
    """I/N, 0 <= I < N: shard I (0-based) of N."""
    parts = text.split("/")
    try:
        index, count = (int(v) for v in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected I/N (shard I of N, I from 0), got {text!r}"
        ) from None
    if count < 1 or not 0 <= index < count:
        raise argparse.ArgumentTypeError(
            f"{text}: shards are numbered 0 to N-1 (0-based, as Slurm's "
            f"SLURM_ARRAY_TASK_ID with --array=0-{max(count, 1) - 1}; with --array=1-{count} "
            f"give $((SLURM_ARRAY_TASK_ID - 1))/{count})"
        )
    return index, count


def _scheduler(text):
    """tcp://HOST:PORT (a running Dask scheduler) or local:N (a LocalCluster of N workers)."""
    if text.startswith("local:"):
        count = text.split(":", 1)[1]
        if not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(f"local:N needs N >= 1 workers, got {text!r}")
        return text
    if "://" not in text or not text.split("://", 1)[1]:
        raise argparse.ArgumentTypeError(
            f"expected tcp://HOST:PORT (a Dask scheduler) or local:N, got {text!r}"
        )
    return text


def add_parser(commands, common):
    parser = commands.add_parser(
        NAME,
        parents=[common],
        help="run many cases from case files (JSONL, CSV, msOpST JSON): golden folders and "
        "one result row each; merge and judge sweeps (docs/sweep.md)",
    )
    parser.add_argument(
        "cases",
        nargs="*",
        metavar="CASES",
        help="case files: .jsonl, .csv (pypto's) or .json (msOpST, Conv2DBackpropInput)",
    )
    parser.add_argument(
        "--out", metavar="DIR", help="the sweep's folder: cases/<id>/ and results.jsonl"
    )
    parser.add_argument(
        "--jobs",
        type=positive,
        default=1,
        metavar="J",
        help="local worker processes (spawned; default 1)",
    )
    parser.add_argument(
        "--shard",
        type=_shard,
        metavar="I/N",
        help="run only shard I of N (0-based: I in 0..N-1), by case id; rows go "
        "to DIR/results.shard-I-of-N.jsonl",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="skip the cases that already have a row in the results file",
    )
    parser.add_argument(
        "--timeout",
        type=seconds,
        metavar="SECONDS",
        help="kill a case that runs longer (a 'timeout' row); runs every case in a worker process",
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="a progress line with an ETA on stderr (default: when a terminal)",
    )
    parser.add_argument(
        "--scheduler",
        type=_scheduler,
        metavar="ADDRESS",
        help="run on a Dask cluster: tcp://HOST:PORT, or local:N for a "
        'LocalCluster of N worker processes (pip install "pypto[cluster]")',
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="DIR",
        help="merge the rows of sweep folders (shards) into one table",
    )
    parser.add_argument(
        "--judge",
        metavar="DIR",
        help="judge the kernel outputs written into DIR's case folders "
        "(rows in DIR/verdicts.jsonl)",
    )
    parser.add_argument(
        "--csv",
        metavar="PATH",
        help="also write the rows as a table: .csv, or .xlsx (needs openpyxl)",
    )
    parser.add_argument(
        "--keep",
        choices=KEEP,
        metavar="WHAT",
        help="which golden case folders to write: all (default: what a kernel runs on), "
        "failed (only those of rows that do not pass), rows (none: only the result rows)",
    )
    parser.add_argument(
        "--standard",
        choices=STANDARDS,
        default=DEFAULT_STANDARD,
        help="the standard a kernel output is judged by (default dual-L0)",
    )


def handle(args):
    """``sweep CASES --out DIR``, ``sweep --merge DIR...``, ``sweep --judge DIR``: exit 0 when
    no row failed, errored or timed out, 1 when one did."""
    from pypto._sweep import results as table

    modes = [
        name
        for name, given in (("CASES", args.cases), ("--merge", args.merge), ("--judge", args.judge))
        if given
    ]
    if len(modes) != 1:
        raise FeError(
            ValueError(
                "sweep takes one of CASES (case files, with --out DIR), --merge DIR... or "
                f"--judge DIR{', not ' + ' and '.join(modes) if modes else ''}"
            )
        )
    if args.csv is not None:  # before any work
        table.check_table_path(args.csv)
    if args.merge or args.judge:
        for option, given in (
            ("--out", args.out),
            ("--shard", args.shard),
            ("--resume", args.resume),
            ("--timeout", args.timeout),
            ("--scheduler", args.scheduler),
            ("--keep", args.keep),
        ):
            if given:
                raise FeError(
                    ValueError(f"{option} applies to a sweep of CASES, not to {modes[0]}")
                )
    if args.merge:
        rows = _merge(args)
    elif args.judge:
        rows = _judge(args)
    else:
        rows = _run_cases(args)
        if rows is None:  # interrupted: _run_cases said where the rows are
            return 130
    if args.csv is not None:
        table.write_table(args.csv, rows)
        print(f"table: {args.csv}")
    bad = sum(row["status"] in ("fail", "error", "timeout") for row in rows)
    return 1 if bad else 0


def _merge(args):
    """``--merge DIR...``: the rows of the folders, as one table."""
    from pypto._golden.files import check_path
    from pypto._sweep import results as table

    for directory in args.merge:
        check_path(directory, "--merge DIR", folder=True)
    rows = table.merge(args.merge)
    print(f"pypto {pypto.__version__}: {len(rows)} rows merged from {', '.join(args.merge)}")
    print(table.summary_text(table.summary(rows)))
    return rows


def _judge(args):
    """``--judge DIR``: the verdict rows of the kernel outputs in DIR's case folders."""
    from pypto._golden.files import check_path
    from pypto._sweep import results as table
    from pypto._sweep.local import judge_sweep

    check_path(args.judge, "--judge DIR", folder=True)
    start = time.perf_counter()
    rows, missing = judge_sweep(args.judge, args.standard)
    print(
        f"pypto {pypto.__version__}: kernel outputs judged in {args.judge} "
        f"({len(rows)} judged, {missing} case folders without output/output.bin)"
    )
    print(table.summary_text(table.summary(rows, time.perf_counter() - start)))
    print(f"rows: {os.path.join(args.judge, table.VERDICTS)}")
    return rows


def _run_cases(args):
    """``CASES --out DIR``: the rows of the cases run (and of those a resumed sweep skipped);
    None when interrupted."""
    from pypto._golden.files import check_path
    from pypto._sweep import results as table
    from pypto._sweep.cases import read_case_file
    from pypto._sweep.local import default_threads, run_sweep, select_shard

    if args.out is None:
        raise FeError(
            ValueError("sweep CASES needs --out DIR (where the case folders and results.jsonl go)")
        )
    check_path(args.out, "--out", folder=True)
    for path in args.cases:
        check_path(path, "CASES")
    if args.scheduler is not None:
        if args.timeout is not None:
            raise FeError(
                ValueError(
                    "--timeout needs local worker processes (killable); "
                    "on a Dask cluster it does not apply"
                )
            )
        if args.jobs != 1:
            raise FeError(
                ValueError(
                    "--jobs counts local worker processes; with "
                    "--scheduler the cluster's workers run the cases"
                )
            )
        from pypto._sweep.cluster import import_distributed

        import_distributed()  # before any work: a clear error when Dask is missing
    cases, dropped, seen = [], 0, set()
    for path in args.cases:  # every file read before any case runs
        found, duplicates = read_case_file(path)
        dropped += duplicates
        for case in found:
            if case["id"] in seen:
                dropped += 1
            else:
                seen.add(case["id"])
                cases.append(case)
    selected = len(select_shard(cases, args.shard))
    found = table.read_rows(table.results_path(args.out, args.shard))
    if found and not args.resume:  # before any output: the sweep would refuse it
        raise FeError(
            ValueError(
                f"{table.results_path(args.out, args.shard)} already holds {len(found)} "
                f"rows: pass --resume to run only the cases without one, or choose "
                f"another --out"
            )
        )
    threads = args.threads or default_threads(
        args.jobs if args.scheduler is None else _local_workers(args.scheduler)
    )
    where = "" if args.shard is None else f", shard {args.shard[0]}/{args.shard[1]}: {selected}"
    runner = f"on {args.scheduler}" if args.scheduler is not None else f"{args.jobs} job(s)"
    print(
        f"pypto {pypto.__version__}: sweep of {len(cases)} cases from "
        f"{', '.join(args.cases)}{where} into {args.out}, {runner} x {threads} thread(s)"
        + (f"; {dropped} duplicate cases dropped" if dropped else "")
    )
    _warn_unreadable(cases)
    earlier = table.run_seconds(found)  # a resumed folder's time so far
    start = time.perf_counter()
    try:
        rows, ran = run_sweep(
            cases,
            args.out,
            jobs=args.jobs,
            threads=threads,
            shard=args.shard,
            resume=args.resume,
            timeout=args.timeout,
            progress=args.progress or sys.stderr.isatty(),
            scheduler=args.scheduler,
            standard=args.standard,
            keep=args.keep or "all",
        )
    except KeyboardInterrupt:
        print(
            f"interrupted: the rows so far are in {table.results_path(args.out, args.shard)}"
            f"; rerun with --resume to finish",
            file=sys.stderr,
        )
        return None
    skipped = len(rows) - ran
    print(
        f"ran {ran} cases"
        + (
            f" ({skipped} skipped: a row was already in {table.results_path(args.out, args.shard)})"
            if skipped
            else ""
        )
    )
    # seconds: this run's and those of the runs a --resume continues
    print(table.summary_text(table.summary(rows, earlier + time.perf_counter() - start)))
    print(f"rows: {table.results_path(args.out, args.shard)}")
    return rows


def _warn_unreadable(cases):
    """One line on stderr when the case files hold cases pypto cannot read: they run nothing
    and become refused rows (rule "unreadable"); the first one's reason."""
    from pypto._sweep.schema import UNREADABLE

    unread = [case for case in cases if case.get("unreadable") is not None]
    if unread:
        print(
            f"warning: {len(unread)} of the cases cannot be read: refused rows (rule "
            f"{UNREADABLE}); the first: {unread[0]['unreadable']}",
            file=sys.stderr,
        )


def _local_workers(scheduler):
    """The worker count of "local:N" (pypto's threads per worker: cores / N); 1 otherwise
    (a remote worker's threads: give --threads)."""
    return int(scheduler.split(":", 1)[1]) if scheduler.startswith("local:") else 1
