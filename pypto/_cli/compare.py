"""``compare``: a kernel's result judged against a golden case (``DIR``) or every conv2d
backward call of an msprobe dump (``--msprobe``) by CANN's accuracy standards."""

import os
import sys

import pypto
from pypto._golden import calls as _calls
from pypto._golden.accuracy import DEFAULT_STANDARD, STANDARDS
from pypto.error import FeError

from .args import add_dtype, natural

NAME = "compare"


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
        "judged call fails (--top and --plot-units do not apply)",
    )
    parser.add_argument(
        "--csv",
        metavar="PATH",
        help="with --msprobe: also write the table as CSV, one row per call",
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
        default=10,
        metavar="K",
        help="how many worst elements to list (default 10)",
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
        folder = os.path.dirname(os.path.abspath(args.json))
        if os.path.isdir(args.json):
            raise FeError(OSError(f"cannot write the JSON report {args.json}: it is a folder"))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise FeError(
                OSError(
                    f"cannot write the JSON report {args.json}: {folder} is not a writable folder"
                )
            )
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
    print(result.report(args.top))
    if args.json is not None:
        report = result.as_dict(args.top)
        report.update(actual=str(path), case_dir=str(args.dir))
        _calls.write_json(args.json, report)
        print(f"JSON report: {args.json}")
    if args.plot is not None:
        sys.stdout.flush()
        result.plot(args.plot, args.plot_units)
        print(f"plot: {args.plot}")
    return 0 if result.passed else 1


def _handle_msprobe(args):
    """``compare --msprobe DUMP_DIR``: every conv2d backward call of an msprobe dump, one line
    each, then the summary; exit 0 when no judged call fails, 1 when one does."""
    from pypto import testing
    from pypto._golden.files import check_path
    from pypto._golden.msprobe import check_report_path

    check_path(args.msprobe, "the msprobe dump DUMP_DIR", folder=True)
    for option, given in (
        ("DIR", args.dir is not None),
        ("--actual", args.actual is not None),
        ("--plot", args.plot is not None),
        ("--dtype", args.dtype_given),
    ):
        if given:
            raise FeError(
                ValueError(
                    f"{option} applies to a golden case, not to --msprobe "
                    f"(which reads every tensor from the dump)"
                )
            )
    for option, value, what in (("--json", args.json, "JSON"), ("--csv", args.csv, "CSV")):
        if value is not None:  # before any work
            check_path(value, option)
            check_report_path(value, what)
    report = testing.compare_msprobe(args.msprobe, standard=args.standard)
    print(
        f"pypto {pypto.__version__}: conv2d backward calls in the msprobe dump "
        f"{args.msprobe} ({len(report.dumps)} dump.json)"
    )
    print(report.text())
    if report.judged == 0:
        print("warning: no call was judged (every one is skipped, reasons above)", file=sys.stderr)
    if args.json is not None:
        report.write_json(args.json)
        print(f"JSON report: {args.json}")
    if args.csv is not None:
        report.write_csv(args.csv)
        print(f"CSV table: {args.csv}")
    return 0 if report.passed else 1
