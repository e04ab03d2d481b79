"""``python -m pypto``: run conv_backward_input and explain tiles from the command line.

- no command: the specification's example and a ResNet-size layer on random data;
- ``run --grad-output ... --weight ...``: a problem you give (tiles suggested unless given);
- ``tiles --grad-output ... --weight ... --l1 M,K,N --l0 M,K,N``: every NPU tile rule with its
  numbers, buffer use, loop counts, and the nearest legal tiles when a rule fails;
- ``info``: version, kernel build, threads;
- ``golden --grad-output ... --weight ... --out DIR``: a golden case for an NPU kernel: random
  inputs, the float64 golden, pypto's own result and a manifest (``pypto/_golden/files.py``);
- ``compare DIR --actual output.bin``: the kernel's result judged by CANN's accuracy standards
  (one verdict line each), where the errors are (image, channel block, M tile), the worst
  elements, and with ``--plot PATH`` a heatmap; exit code 0 when the chosen standard passes,
  1 when it fails.

Runs print shapes, tiles, time, GFLOP/s and the error against a float64 NumPy reference (in
units of the output dtype's ulp, and how many elements differ from the once-rounded value).
Bad arguments print one ``error:`` line and exit with code 2.
"""

import argparse
import math
import os
import platform
import sys
import time

import numpy as np

import pypto
from pypto import pypto_impl
from pypto._core.cpus import default_threads
from pypto._core.memory import check_host_memory
from pypto._core.rules import TILE_RULES, problem_from_shapes
from pypto._core.suggest import smallest_tiles
from pypto._dtypes import DTYPE_NAMES, numpy_dtype
from pypto._golden import calls as _calls
from pypto._golden.accuracy import DEFAULT_STANDARD, STANDARDS, ulp_at
from pypto._golden.case import comparison_bytes, error_bound, golden_bytes, golden_dgrad, make_case
from pypto._kernels.dispatch import kernel_info
from pypto.error import FeError

# name: (grad_output shape, weight shape, input_size, strides, paddings, dilations, L1, L0)
EXAMPLES = {
    "spec example": (
        (1, 16, 5, 32),
        (16, 16, 3, 3),
        (1, 16, 5, 32),
        (1, 1),
        (1, 1, 1, 1),
        (1, 1),
        (16, 144, 16),
        (16, 16, 16),
    ),
    "ResNet 3x3 layer": (
        (1, 64, 56, 56),
        (64, 64, 3, 3),
        (1, 64, 56, 56),
        (1, 1),
        (1, 1, 1, 1),
        (1, 1),
        (112, 576, 64),
        (112, 144, 64),
    ),
}


def run_example(name, spec, dtype, rng):
    """Run one problem on random data, check it against float64 NumPy, print what happened."""
    dy_shape, w_shape, input_size, strides, paddings, dilations, l1, l0 = spec[:8]
    vec = spec[8] if len(spec) > 8 else (16, 16, 16, 16)
    np_dtype = numpy_dtype(dtype)
    # the rules (and the tiles) and the memory first: random data for a huge problem must not
    # be drawn
    case = make_case(
        dy_shape, w_shape, input_size, dtype, strides, paddings, dilations, (l1, l0), vec
    )
    elements = math.prod(dy_shape) + math.prod(w_shape)
    check_host_memory(
        10 * elements + 2 * golden_bytes(case) + comparison_bytes(case),
        case.problem,
        "random inputs and the float64 check of the result",
    )
    dy = rng.uniform(-1, 1, dy_shape).astype(np_dtype)
    w = rng.uniform(-1, 1, w_shape).astype(np_dtype)
    args = (
        pypto.from_numpy(dy),
        list(input_size),
        pypto.from_numpy(w),
        dtype,
        list(strides),
        list(paddings),
        list(dilations),
    )
    with pypto.options(
        convbp_tile_shapes=(pypto_impl.ConvBpTileL1Info(*l1), pypto_impl.ConvBpTileL0Info(*l0)),
        vec_tile_shapes=list(vec),
    ):
        pypto.conv_backward_input(*args)  # warm-up
        start = time.perf_counter()
        out = pypto.conv_backward_input(*args).numpy()
        seconds = time.perf_counter() - start
    golden = golden_dgrad(case, dy, w)
    # Allowed: half an ulp (the one rounding, to nearest) plus fp32 accumulation over K terms.
    error = np.abs(out.astype(np.float64) - golden)
    within = bool(np.all(error <= error_bound(case, dy, w, golden, rounding_ulps=0.5)))
    err_ulp = error / ulp_at(golden, dtype)
    differ = int(np.count_nonzero(out != golden.astype(np_dtype)))
    print(f"{name}: {case.describe()}")
    print(f"  {case.describe_tiles()}")
    print(
        f"  {seconds * 1e3:.3f} ms, {case.problem.flops / seconds / 1e9:.1f} GFLOP/s; "
        f"max error {err_ulp.max():.3f} ulp; {differ} of {out.size} elements differ from the "
        f"float64 result rounded once; within the fp32-accumulation bound: {within}"
    )
    return within


def _ints(text):
    try:
        return [int(v) for v in text.replace(" ", "").split(",") if v != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}") from None


def _add_problem_args(parser):
    parser.add_argument("--grad-output", type=_ints, required=True, metavar="N,COUT,HOUT,WOUT")
    parser.add_argument("--weight", type=_ints, required=True, metavar="COUT,CIN,KH,KW")
    parser.add_argument(
        "--input-size", type=_ints, metavar="N,CIN,HIN,WIN", help="default: the smallest valid size"
    )
    parser.add_argument(
        "--dtype", choices=["fp16", "bf16"], default=argparse.SUPPRESS, help="default fp16"
    )
    parser.add_argument("--strides", type=_ints, default=[1, 1], metavar="SH,SW")
    parser.add_argument("--paddings", type=_ints, default=[0, 0, 0, 0], metavar="T,B,L,R")
    parser.add_argument("--dilations", type=_ints, default=[1, 1], metavar="DH,DW")
    parser.add_argument(
        "--l1",
        type=_ints,
        metavar="ML1,KL1,NL1",
        help="L1 tiles, upstream order M, K, N (default: suggested)",
    )
    parser.add_argument(
        "--l0", type=_ints, metavar="ML0,KL0,NL0", help="L0 tiles, M, K, N (default: suggested)"
    )
    parser.add_argument(
        "--vec",
        type=_ints,
        default=[16, 16, 16, 16],
        metavar="V,V,V,V[,V]",
        help="vector tile shapes (default 16,16,16,16)",
    )


def _problem_args(args):
    """(dy_shape, w_shape, input_size, strides, paddings, dilations, l1, l0, vec) from the CLI."""
    dtype = DTYPE_NAMES[args.dtype]
    input_size = args.input_size
    if input_size is None:
        (hin, _), (win, _) = pypto.conv_backward_input_size_range(
            args.grad_output, args.weight, args.strides, args.paddings, args.dilations
        )
        input_size = [args.grad_output[0], args.weight[1] if len(args.weight) > 1 else 0, hin, win]
    l1, l0 = args.l1, args.l0
    if l1 is None or l0 is None:
        try:
            s_l1, s_l0 = pypto.suggest_convbp_input_tile_shapes(
                args.grad_output,
                args.weight,
                input_size,
                dtype,
                args.strides,
                args.paddings,
                args.dilations,
            )
        except pypto.error.ConvBpInputError as exc:
            if exc.rule not in TILE_RULES or args.command != "tiles":
                raise
            # no legal tiles: explain the smallest ones, which show the rule that fails
            s_l1, s_l0 = smallest_tiles(
                problem_from_shapes(
                    args.grad_output,
                    args.weight,
                    input_size,
                    dtype,
                    args.strides,
                    args.paddings,
                    args.dilations,
                )
            )
        l1 = l1 or list(s_l1.as_tuple())
        l0 = l0 or list(s_l0.as_tuple())
    for name, value in (("--l1", l1), ("--l0", l0)):
        if len(value) != 3:
            raise pypto.error.FeError(ValueError(f"{name} takes 3 ints (M, K, N), got {value}"))
    return (
        args.grad_output,
        args.weight,
        input_size,
        args.strides,
        args.paddings,
        args.dilations,
        l1,
        l0,
        args.vec,
    ), dtype


def _banner():
    info = kernel_info()
    return (
        f"pypto {pypto.__version__}: backend cpu ({info['isa']}), "
        f"{pypto.get_num_threads()} thread(s), OpenMP {'on' if info['openmp'] else 'off'}"
    )


def _cmd_examples(args):
    print(_banner())
    dtype = DTYPE_NAMES[args.dtype]
    rng = np.random.default_rng(0)
    ok = all([run_example(name, spec, dtype, rng) for name, spec in EXAMPLES.items()])
    print("check against the float64 reference:", "passed" if ok else "FAILED")
    return 0 if ok else 1


def _cmd_run(args):
    print(_banner())
    spec, dtype = _problem_args(args)
    ok = run_example("run", spec, dtype, np.random.default_rng(args.seed))
    print("check against the float64 reference:", "passed" if ok else "FAILED")
    return 0 if ok else 1


def _cmd_tiles(args):
    spec, dtype = _problem_args(args)
    dy, w, size, strides, paddings, dilations, l1, l0, vec = spec
    report = pypto.explain_convbp_input_tiling(
        dy,
        w,
        size,
        dtype,
        strides,
        paddings,
        dilations,
        pypto_impl.ConvBpTileL1Info(*l1),
        pypto_impl.ConvBpTileL0Info(*l0),
        vec_tile_shapes=vec,
    )
    print(report)
    return 0 if report.legal else 1


def _cmd_info(args):
    info = kernel_info()
    print(f"pypto {pypto.__version__}")
    print(
        f"cpu kernel: ISA {info['isa']} [{info['reason']}], micro-kernel "
        f"{info['mr']}x{info['nr']}, bf16 dot product {'yes' if info['bf16_dot'] else 'no'}, "
        f"OpenMP {'on' if info['openmp'] else 'off'}, {pypto.get_num_threads()} thread(s)"
    )
    print(
        f"default threads: {default_threads()[0]}, set by {default_threads()[1]} "
        "(OMP_NUM_THREADS, --threads and set_num_threads win)"
    )
    print(
        f"bf16 sum order: {info['bf16_sum_order']} (sum_order option, PYPTO_SUM_ORDER; fp16 "
        f"sums sequentially); order 'tile' here: {info['tile_unit']}"
    )
    print(
        f"cpu levels: built {', '.join(info['built_levels'])}; this CPU runs "
        f"{', '.join(info['cpu_levels'])} ({platform.machine()}; features: "
        f"{' '.join(info['cpu_features']) or 'none detected'})"
    )
    reason = pypto.device.unavailable_reason()
    print(
        f"npu: {'available' if reason is None else 'unavailable: ' + reason}; backend "
        f"requested: {pypto.get_device()} (set_device / PYPTO_DEVICE)"
    )
    verdict = pypto.device.known_self_check()
    if verdict is not None:
        print(
            f"npu self-check: {'passed' if verdict['passed'] else 'FAILED'} "
            f"({verdict['checked_at']}, {verdict['source']}): {verdict['summary']}"
        )
    return 0


def _cmd_selfcheck(args):
    """The NPU kernel's self-check on this device: exit 0 passed, 1 failed, 2 no NPU."""
    reason = pypto.device.runtime_unavailable_reason()
    if reason is not None:
        raise pypto.device.NpuUnavailableError(f"no self-check: the NPU cannot run here: {reason}")
    verdict = pypto.device.self_check(again=args.again)
    print(
        f"pypto {pypto.__version__}: NPU self-check ({verdict['source']}, {verdict['checked_at']})"
    )
    for problem in verdict["problems"]:
        print(
            f"  {'pass' if problem['passed'] else 'FAIL'}  {problem['problem']}"
            + ("" if problem["passed"] else f": {problem['detail']}")
        )
    print(
        f"verdict: {'PASS' if verdict['passed'] else 'FAIL'}: {verdict['summary']}; auto "
        f"{'uses' if verdict['passed'] else 'does not use'} the NPU"
    )
    return 0 if verdict["passed"] else 1


def _cmd_golden(args):
    from pypto import testing
    from pypto._golden.case import (
        comparison_bytes,
        draw_inputs,
        golden_bytes,
        golden_dgrad,
        inputs_bytes,
        make_case,
        pypto_dgrad,
    )
    from pypto._golden.files import ACTUAL, check_case_folder, write_case

    # before any work: a folder holding a case needs --force (its old result must not stay)
    check_case_folder(args.out, args.force)
    spec, dtype = _problem_args(args)
    dy_shape, w_shape, size, strides, paddings, dilations, l1, l0, vec = spec
    case = make_case(dy_shape, w_shape, size, dtype, strides, paddings, dilations, (l1, l0), vec)
    # the rules first, then the memory: random data for a huge problem must not be drawn
    check_host_memory(
        inputs_bytes(case)
        + 2 * golden_bytes(case)
        + comparison_bytes(case)
        + 4 * math.prod(case.input_size),
        case.problem,
        "random inputs, the float64 golden, its error bound and the check of pypto's result",
    )
    dy, w = draw_inputs(case, args.dist, args.seed)
    golden = golden_dgrad(case, dy, w)
    reference = pypto_dgrad(case, dy, w)
    check = testing.compare(
        reference,
        dy,
        w,
        list(case.input_size),
        case.strides,
        case.paddings,
        case.dilations,
        tiles=(case.l1, case.l0, case.vec),
        golden=golden,
        reference=reference,
    )
    _, removed = write_case(
        args.out, case, dy, w, golden, reference, args.seed, args.dist, replace=args.force
    )
    dt = case.dtype_name
    actual = os.path.join(args.out, ACTUAL[0] + ".bin")
    print(
        f"pypto {pypto.__version__}: golden case in {args.out} ({args.dist} inputs, seed "
        f"{args.seed})"
    )
    print(f"  {case.describe()}")
    print(f"  {case.describe_tiles()}")
    print(
        f"  wrote input/grad_output.bin, input/weight.bin ({dt}), output/golden.bin "
        f"(float64), output/pypto.bin ({dt}), each with a .npy twin, and manifest.json"
    )
    if removed:
        print(
            f"  removed the old case's {', '.join(removed)} (--force): no result of the old "
            f"case stays beside the new one"
        )
    verdicts = ", ".join(
        f"{sid} {'pass' if v.passed else 'FAIL'}" for sid, v in check.verdicts.items()
    )
    print(
        f"  pypto's own result: max {check.metrics.max_ulp:.3g} ulp, "
        f"{check.localisation.outside_count} elements outside the fp32-accumulation bound; "
        f"{verdicts}"
    )
    print(
        f"next: write the kernel's dx to {actual} ({dt}, {list(case.input_size)}, "
        f"{2 * math.prod(case.input_size)} bytes, little-endian), then"
    )
    print(f"  pypto compare {args.out} --actual {actual}")
    return 0


def _cmd_compare(args):
    from pypto import testing
    from pypto._golden.files import (
        check_path,
        read_array,
        read_case,
        read_inputs,
        resolve_actual,
        stale_warning,
    )
    from pypto._golden.localise import check_plot_path, plotting_available

    if args.msprobe is not None:
        return _cmd_compare_msprobe(args)
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
    actual = read_array(path, case.dtype_name, case.input_size, case)
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


def _cmd_compare_msprobe(args):
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


def _cmd_sweep(args):
    """``sweep CASES --out DIR``, ``sweep --merge DIR...``, ``sweep --judge DIR``: exit 0 when
    no row failed, errored or timed out, 1 when one did."""
    from pypto._golden.files import check_path
    from pypto._sweep import results as table
    from pypto._sweep.cases import read_case_file
    from pypto._sweep.local import default_threads, judge_sweep, run_sweep, select_shard

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
        ):
            if given:
                raise FeError(
                    ValueError(f"{option} applies to a sweep of CASES, not to {modes[0]}")
                )
    if args.merge:
        for directory in args.merge:
            check_path(directory, "--merge DIR", folder=True)
        rows = table.merge(args.merge)
        print(f"pypto {pypto.__version__}: {len(rows)} rows merged from {', '.join(args.merge)}")
        print(table.summary_text(table.summary(rows)))
    elif args.judge:
        check_path(args.judge, "--judge DIR", folder=True)
        start = time.perf_counter()
        rows, missing = judge_sweep(args.judge, args.standard)
        print(
            f"pypto {pypto.__version__}: kernel outputs judged in {args.judge} "
            f"({len(rows)} judged, {missing} case folders without output/output.bin)"
        )
        print(table.summary_text(table.summary(rows, time.perf_counter() - start)))
        print(f"rows: {os.path.join(args.judge, table.VERDICTS)}")
    else:
        if args.out is None:
            raise FeError(
                ValueError(
                    "sweep CASES needs --out DIR (where the case folders and results.jsonl go)"
                )
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
        for path in args.cases:  # every file read whole before any case runs
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
            )
        except KeyboardInterrupt:
            print(
                f"interrupted: the rows so far are in {table.results_path(args.out, args.shard)}"
                f"; rerun with --resume to finish",
                file=sys.stderr,
            )
            return 130
        print(
            f"ran {ran} cases ({len(rows) - ran} skipped: a row was already in "
            f"{table.results_path(args.out, args.shard)})"
        )
        print(table.summary_text(table.summary(rows, time.perf_counter() - start)))
        print(f"rows: {table.results_path(args.out, args.shard)}")
    if args.csv is not None:
        table.write_table(args.csv, rows)
        print(f"table: {args.csv}")
    bad = sum(row["status"] in ("fail", "error", "timeout") for row in rows)
    return 1 if bad else 0


def _local_workers(scheduler):
    """The worker count of "local:N" (pypto's threads per worker: cores / N); 1 otherwise
    (a remote worker's threads: give --threads)."""
    return int(scheduler.split(":", 1)[1]) if scheduler.startswith("local:") else 1


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


def _positive(text):
    """An int >= 1 (a count of jobs)."""
    value = _ints(text)
    if len(value) != 1 or value[0] < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}")
    return value[0]


def _seconds(text):
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


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


def _natural(text):
    """An int >= 0 (a seed, a count)."""
    value = _ints(text)
    if len(value) != 1 or value[0] < 0:
        raise argparse.ArgumentTypeError(f"expected an int >= 0, got {text!r}")
    return value[0]


def main(argv=None):
    # Options valid before and after the command: the subcommands' copies default to
    # SUPPRESS, so a value given before the command is not overwritten by their default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--threads",
        type=int,
        default=argparse.SUPPRESS,
        help="CPU threads (default: OMP_NUM_THREADS or all CPUs)",
    )
    parser = argparse.ArgumentParser(
        prog="python -m pypto",
        parents=[common],
        description="Run pypto.conv_backward_input on built-in examples (no command), on a "
        "problem you give (run), explain a set of tiles (tiles), write a golden "
        "case for an NPU kernel (golden), judge its result (compare) or check the NPU kernel on "
        "this device (selfcheck).",
    )
    parser.add_argument(
        "--dtype", choices=["fp16", "bf16"], default=argparse.SUPPRESS, help="default fp16"
    )
    commands = parser.add_subparsers(dest="command")
    run = commands.add_parser(
        "run", parents=[common], help="run one problem on random data and check it"
    )
    _add_problem_args(run)
    run.add_argument("--seed", type=_natural, default=0, help="random data seed, an int >= 0")
    tiles = commands.add_parser(
        "tiles", parents=[common], help="explain how the NPU rules judge a set of tiles"
    )
    _add_problem_args(tiles)
    commands.add_parser("info", parents=[common], help="version, kernel build and threads")
    selfcheck = commands.add_parser(
        "selfcheck",
        parents=[common],
        help="check the NPU kernel against the CPU on this device (auto uses the NPU only after "
        "this passed; the verdict is cached)",
    )
    selfcheck.add_argument(
        "--again", action="store_true", help="run it even when a verdict is cached"
    )
    golden = commands.add_parser(
        "golden",
        parents=[common],
        help="write random inputs, the float64 golden, pypto's result and a manifest to --out",
    )
    _add_problem_args(golden)
    golden.add_argument("--seed", type=_natural, default=0, help="random data seed, an int >= 0")
    golden.add_argument(
        "--dist",
        choices=["uniform", "normal", "ints"],
        default="uniform",
        help="inputs uniform in [-1, 1), standard normal, or ints in [-4, 4] (default uniform)",
    )
    golden.add_argument("--out", required=True, metavar="DIR", help="the case's folder")
    golden.add_argument(
        "--force",
        action="store_true",
        help="write over a case already in DIR: deletes its old kernel results "
        "(every file in DIR/output that golden does not write)",
    )
    compare = commands.add_parser(
        "compare",
        parents=[common],
        help="judge a kernel's result against a golden case: verdicts, where, worst elements",
    )
    compare.add_argument(
        "dir",
        metavar="DIR",
        nargs="?",
        help="a folder written by `pypto golden` (not with --msprobe)",
    )
    compare.add_argument(
        "--msprobe",
        metavar="DUMP_DIR",
        help="judge every conv2d backward call of an msprobe dump (task "
        "tensor; a step or rank folder holding dump.json, or any folder "
        "above it): one line per call, then a summary; exit 1 when a "
        "judged call fails (--top and --plot-units do not apply)",
    )
    compare.add_argument(
        "--csv",
        metavar="PATH",
        help="with --msprobe: also write the table as CSV, one row per call",
    )
    compare.add_argument(
        "--actual",
        metavar="FILE",
        help="the kernel's dx, .bin (raw, dtype and shape from the manifest) "
        "or .npy; a relative name not found is looked for in DIR/output "
        "(default DIR/output/output.bin)",
    )
    compare.add_argument(
        "--standard",
        choices=[*STANDARDS, "all"],
        default=DEFAULT_STANDARD,
        help="the standard that decides the exit code (default dual-L0; all: every one)",
    )
    compare.add_argument("--plot", metavar="PATH", help="save a heatmap of the error (PNG, ...)")
    compare.add_argument(
        "--json",
        metavar="PATH",
        help="also write the whole report as JSON: metrics, every verdict with "
        "its thresholds and source, localisation, worst elements (with "
        "--msprobe: the table, one entry per call)",
    )
    compare.add_argument(
        "--plot-units",
        choices=["ulp", "relative", "bound"],
        default="ulp",
        help="the heatmap's error: in ulps of the output dtype (default), "
        "relative, or divided by the fp32-accumulation bound",
    )
    compare.add_argument(
        "--top",
        type=_natural,
        default=10,
        metavar="K",
        help="how many worst elements to list (default 10)",
    )
    compare.add_argument(
        "--dtype",
        choices=["fp16", "bf16"],
        default=argparse.SUPPRESS,
        help="must match the manifest's",
    )
    sweep = commands.add_parser(
        "sweep",
        parents=[common],
        help="run many cases from case files (JSONL, CSV, msOpST JSON): golden folders and "
        "one result row each; merge and judge sweeps (docs/sweep.md)",
    )
    sweep.add_argument(
        "cases",
        nargs="*",
        metavar="CASES",
        help="case files: .jsonl, .csv (pypto's) or .json (msOpST, Conv2DBackpropInput)",
    )
    sweep.add_argument(
        "--out", metavar="DIR", help="the sweep's folder: cases/<id>/ and results.jsonl"
    )
    sweep.add_argument(
        "--jobs",
        type=_positive,
        default=1,
        metavar="J",
        help="local worker processes (spawned; default 1)",
    )
    sweep.add_argument(
        "--shard",
        type=_shard,
        metavar="I/N",
        help="run only shard I of N (0-based: I in 0..N-1), by case id; rows go "
        "to DIR/results.shard-I-of-N.jsonl",
    )
    sweep.add_argument(
        "--resume",
        action="store_true",
        help="skip the cases that already have a row in the results file",
    )
    sweep.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="kill a case that runs longer (a 'timeout' row); runs every case in a worker process",
    )
    sweep.add_argument(
        "--progress",
        action="store_true",
        help="a progress line with an ETA on stderr (default: when a terminal)",
    )
    sweep.add_argument(
        "--scheduler",
        type=_scheduler,
        metavar="ADDRESS",
        help="run on a Dask cluster: tcp://HOST:PORT, or local:N for a "
        'LocalCluster of N worker processes (pip install "pypto[cluster]")',
    )
    sweep.add_argument(
        "--merge",
        nargs="+",
        metavar="DIR",
        help="merge the rows of sweep folders (shards) into one table",
    )
    sweep.add_argument(
        "--judge",
        metavar="DIR",
        help="judge the kernel outputs written into DIR's case folders "
        "(rows in DIR/verdicts.jsonl)",
    )
    sweep.add_argument(
        "--csv",
        metavar="PATH",
        help="also write the rows as a table: .csv, or .xlsx (needs openpyxl)",
    )
    sweep.add_argument(
        "--standard",
        choices=STANDARDS,
        default=DEFAULT_STANDARD,
        help="the standard a kernel output is judged by (default dual-L0)",
    )
    args = parser.parse_args(argv)
    # the defaults, for options given nowhere (not set_defaults: parents share the actions)
    args.threads = getattr(args, "threads", None)
    args.dtype_given = hasattr(args, "dtype")
    args.dtype = getattr(args, "dtype", "fp16")
    try:
        pypto.set_num_threads(args.threads)
        handler = {
            None: _cmd_examples,
            "run": _cmd_run,
            "tiles": _cmd_tiles,
            "info": _cmd_info,
            "selfcheck": _cmd_selfcheck,
            "golden": _cmd_golden,
            "compare": _cmd_compare,
            "sweep": _cmd_sweep,
        }[args.command]
        code = handler(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return code
    except pypto.PyptoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`pypto | head`): no traceback, and none at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
