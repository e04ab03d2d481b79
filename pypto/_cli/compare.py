"""``compare``: a kernel's result judged against a golden case (``DIR``) or the conv2d backward
calls of an msprobe dump (``--msprobe``; ``--api`` chooses calls, and one chosen call gets a
golden case's report, heatmap and, with ``--extract``, a golden case folder) by CANN's accuracy
standards."""

import sys

import pypto
from pypto._golden import calls as _calls
from pypto._golden.accuracy import DEFAULT_STANDARD, STANDARDS
from pypto.error import FeError

from .args import add_dtype, natural

NAME = "compare"
DEFAULT_TOP = 10  # worst elements listed
# the options of --msprobe alone: option -> its attribute
_MSPROBE_ONLY = {"--api": "api", "--extract": "extract", "--out": "out", "--force": "force"}


def add_parser(commands, common):
    parser = commands.add_parser(
        NAME,
        parents=[common],
        help="judge a kernel's result against a golden case: verdicts, where, worst elements",
    )
    parser.add_argument(
        "dir",
        metavar="DIR",
        nargs="?",
        help="a folder written by `pypto golden` (not with --msprobe)",
    )
    parser.add_argument(
        "--msprobe",
        metavar="DUMP_DIR",
        help="judge every conv2d backward call of an msprobe dump (task "
        "tensor; a step or rank folder holding dump.json, or any folder "
        "above it): one line per call, then a summary; exit 1 when a "
        "judged call fails",
    )
    parser.add_argument(
        "--api",
        metavar="NAME",
        help="with --msprobe: only the calls whose api name (Functional.conv2d.1.backward) "
        "or grad_input name (...backward.output.0) is NAME or matches it as a glob "
        "('*conv2d.1*'); one call chosen: its whole report, --top and --plot",
    )
    parser.add_argument(
        "--extract",
        metavar="NAME",
        help="with --msprobe and --out: write the one call NAME (as --api) as a golden case "
        "folder, the dumped grad_input as output/output.bin, for `pypto compare DIR`",
    )
    parser.add_argument(
        "--out", metavar="DIR", help="with --extract: the golden case folder to write"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="with --extract: replace a case already in --out (deleting its old results)",
    )
    parser.add_argument(
        "--csv",
        metavar="PATH",
        help="with --msprobe: also write the table, one row per call: CSV, or .xlsx "
        "(needs openpyxl)",
    )
    parser.add_argument(
        "--actual",
        metavar="FILE",
        help="the kernel's dx, .bin (raw, dtype and shape from the manifest) "
        "or .npy; a relative name not found is looked for in DIR/output "
        "(default DIR/output/output.bin)",
    )
    parser.add_argument(
        "--standard",
        choices=[*STANDARDS, "all"],
        default=DEFAULT_STANDARD,
        help="the standard that decides the exit code (default dual-L0; all: every one)",
    )
    parser.add_argument("--plot", metavar="PATH", help="save a heatmap of the error (PNG, ...)")
    parser.add_argument(
        "--json",
        metavar="PATH",
        help="also write the whole report as JSON: metrics, every verdict with "
        "its thresholds and source, localisation, worst elements (with "
        "--msprobe: the table, one entry per call)",
    )
    parser.add_argument(
        "--plot-units",
        choices=["ulp", "relative", "bound"],
        default="ulp",
        help="the heatmap's error: in ulps of the output dtype (default), "
        "relative, or divided by the fp32-accumulation bound",
    )
    parser.add_argument(
        "--top",
        type=natural,
        default=None,
        metavar="K",
        help="how many worst elements to list (default 10; with --msprobe: of the one call chosen)",
    )
    add_dtype(parser, help="must match the manifest's")


def handle(args):
    """``compare DIR`` (``--msprobe`` goes to _handle_msprobe): the verdicts, where the errors
    are, the worst elements (and the JSON report, the heatmap); exit 0 when the chosen standard
    passes, 1 when it fails."""
    from pypto import testing
    from pypto._golden.files import (
        check_path,
        read_case,
        read_inputs,
        read_result,
        resolve_actual,
        stale_warning,
    )
    from pypto._golden.localise import check_plot_path, plotting_available

    if args.msprobe is not None:
        return _handle_msprobe(args)
    if args.csv is not None:
        raise FeError(ValueError("--csv writes the --msprobe table; for a golden case use --json"))
    for option, value in _MSPROBE_ONLY.items():
        if getattr(args, value) not in (None, False):
            raise FeError(ValueError(f"{option} applies to --msprobe DUMP_DIR, not to a case"))
    if args.dir is None:
        raise FeError(
            ValueError(
                "compare needs DIR (a folder written by `pypto golden`) or --msprobe DUMP_DIR"
            )
        )
    check_path(args.dir, "the case folder DIR", folder=True)
    for option, value in (("--actual", args.actual), ("--plot", args.plot), ("--json", args.json)):
        if value is not None:
            check_path(value, option)
    if args.plot is not None:
        missing = plotting_available()  # before any work: the verdict must not be lost
        if missing is not None:
            raise missing
        check_plot_path(args.plot)  # so must a format matplotlib cannot write
    if args.json is not None:  # before any work, like the plot
        _calls.check_report_path(args.json, "JSON")
    top = DEFAULT_TOP if args.top is None else args.top
    case, manifest = read_case(args.dir)
    if args.dtype_given and args.dtype != case.dtype_name:
        raise FeError(
            ValueError(
                f"--dtype {args.dtype}, but the case in {args.dir} is "
                f"{case.dtype_name} (manifest.json)"
            )
        )
    path = resolve_actual(args.dir, args.actual)
    actual = read_result(args.dir, case, path, manifest)  # in the layout the manifest gives
    dy, w, golden, reference = read_inputs(args.dir, case, manifest)
    stale = stale_warning(args.dir, path, manifest)
    if stale is not None:
        print(stale, file=sys.stderr)
    result = testing.compare(
        actual,
        dy,
        w,
        list(case.input_size),
        case.strides,
        case.paddings,
        case.dilations,
        tiles=(case.l1, case.l0, case.vec),
        standard=args.standard,
        golden=golden,
        reference=reference,
        # cases written before bf16 had two orders summed sequentially
        reference_sum_order=manifest.get("sum_order", "sequential"),
    )
    # the report and the JSON first: a plot that fails must not take the verdict with it
    print(f"pypto {pypto.__version__}: {path} against the golden in {args.dir}")
    print(result.report(top))
    if args.json is not None:
        report = result.as_dict(top)
        report.update(actual=str(path), case_dir=str(args.dir))
        _calls.write_json(args.json, report)
        print(f"JSON report: {args.json}")
    if args.plot is not None:
        sys.stdout.flush()
        result.plot(args.plot, args.plot_units)
        print(f"plot: {args.plot}")
    return 0 if result.passed else 1


def _handle_msprobe(args):
    """``compare --msprobe DUMP_DIR``: the conv2d backward calls of an msprobe dump (those
    --api or --extract names), one line each, then the summary; one call chosen: its whole
    report, the heatmap, the golden case folder. Exit 0 when no judged call fails, 1 when one
    does; every option is checked, and the dump.json files read, before any tensor is."""
    from pypto._golden import msprobe
    from pypto._golden.files import check_case_folder

    _check_msprobe_options(args)
    pattern = args.extract if args.extract is not None else args.api
    dumps, calls = msprobe.read_calls(args.msprobe, pattern)
    drill = args.plot is not None or args.top is not None or args.extract is not None
    chosen = msprobe.chosen_calls(calls)
    if drill:
        _check_one_call(args, chosen)
    if args.extract is not None:
        check_case_folder(args.out, args.force)
    report = msprobe.judge_calls(args.msprobe, dumps, calls, args.standard)
    top = DEFAULT_TOP if args.top is None else args.top
    print(
        f"pypto {pypto.__version__}: conv2d backward calls in the msprobe dump "
        f"{args.msprobe} ({len(report.dumps)} dump.json)"
    )
    print(report.text())
    if report.judged == 0:
        print("warning: no call was judged (every one is skipped, reasons above)", file=sys.stderr)
    if report.result is not None and (drill or args.api is not None):
        print(report.chosen_text(top))
    if args.json is not None:
        report.write_json(args.json, top)
        print(f"JSON report: {args.json}")
    if args.csv is not None:
        report.write_csv(args.csv)
        print(f"CSV table: {args.csv}")
    if drill and report.result is None:  # judging found it too large: the row says why
        raise FeError(ValueError(f"{chosen[0].api} was not judged: {report.rows[0]['reason']}"))
    if args.extract is not None:
        _, removed, actual = msprobe.extract_call(chosen[0], report.result, args.out, args.force)
        print(f"golden case: {args.out} ({chosen[0].api}; the dumped grad_input is {actual})")
        if removed:
            print(f"  removed the old case's {', '.join(removed)} (--force)")
        print(f"next: pypto compare {args.out} --plot {args.out}/dx.png --top 5")
    if args.plot is not None:
        sys.stdout.flush()
        report.result.plot(args.plot, args.plot_units)
        print(f"plot: {args.plot}")
    return 0 if report.passed else 1


def _check_msprobe_options(args):
    """Every --msprobe option checked before any work: one PyptoError (an error: line)."""
    from pypto._golden.files import check_path
    from pypto._golden.localise import check_plot_path, plotting_available

    check_path(args.msprobe, "the msprobe dump DUMP_DIR", folder=True)
    for option, given in (
        ("DIR", args.dir is not None),
        ("--actual", args.actual is not None),
        ("--dtype", args.dtype_given),
    ):
        if given:
            raise FeError(
                ValueError(
                    f"{option} applies to a golden case, not to --msprobe "
                    f"(which reads every tensor from the dump)"
                )
            )
    if args.api is not None and args.extract is not None:
        raise FeError(ValueError("give --api or --extract, not both (--extract NAME chooses too)"))
    if (args.out is not None or args.force) and args.extract is None:
        raise FeError(ValueError("--out and --force go with --extract NAME"))
    if args.extract is not None and args.out is None:
        raise FeError(ValueError("--extract NAME needs --out DIR, the golden case folder"))
    for option in ("api", "extract"):
        value = getattr(args, option)
        if value is not None and not value.strip():
            raise FeError(ValueError(f"--{option} is empty: give a call's name or a glob"))
    if args.json is not None:
        check_path(args.json, "--json")
        _calls.check_report_path(args.json, "JSON")
    if args.csv is not None:
        check_path(args.csv, "--csv")
        _calls.check_table_path(args.csv, "CSV")
    if args.plot is not None:
        check_path(args.plot, "--plot")
        missing = plotting_available()
        if missing is not None:
            raise missing
        check_plot_path(args.plot)


def _check_one_call(args, chosen):
    """--plot, --top and --extract are about one call: a PyptoError unless exactly one is
    chosen and it is not skipped."""
    option = next(
        name
        for name, value in (("--extract", args.extract), ("--plot", args.plot), ("--top", args.top))
        if value is not None
    )
    if len(chosen) != 1:
        shown = ", ".join(f"{c.label}/{c.api}" for c in chosen[:6])
        more = f" and {len(chosen) - 6} more" if len(chosen) > 6 else ""
        raise FeError(
            ValueError(
                f"{option} is about one call, but {len(chosen)} are chosen ({shown}{more}): "
                f"pick one with --api NAME (and, for a dump of several steps or ranks, give "
                f"that step's folder)"
            )
        )
    if chosen[0].skip is not None:
        raise FeError(ValueError(f"{option}: {chosen[0].api} is skipped: {chosen[0].skip}"))
