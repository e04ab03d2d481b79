"""``golden``: a golden case for an NPU kernel in a folder: random inputs, the float64 golden,
pypto's own result and a manifest (the folder's layout: ``pypto/_golden/files.py``)."""

import math
import os

import pypto
from pypto._core.memory import check_host_memory
from pypto._golden.case import (
    comparison_bytes,
    draw_inputs,
    golden_bytes,
    golden_dgrad,
    inputs_bytes,
    make_case,
    pypto_dgrad,
)

from .args import add_seed
from .problem import add_problem_args, problem_spec

NAME = "golden"


def add_parser(commands, common):
    parser = commands.add_parser(
        NAME,
        parents=[common],
        help="write random inputs, the float64 golden, pypto's result and a manifest to --out",
    )
    add_problem_args(parser)
    add_seed(parser)
    parser.add_argument(
        "--dist",
        choices=["uniform", "normal", "ints"],
        default="uniform",
        help="inputs uniform in [-1, 1), standard normal, or ints in [-4, 4] (default uniform)",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="the case's folder")
    parser.add_argument(
        "--force",
        action="store_true",
        help="write over a case already in DIR: deletes its old kernel results "
        "(every file in DIR/output that golden does not write)",
    )


def handle(args):
    """Write the case, check pypto's own result against it, say what to run next; exit 0."""
    from pypto import testing
    from pypto._golden.files import ACTUAL, check_case_folder, write_case

    # before any work: a folder holding a case needs --force (its old result must not stay)
    check_case_folder(args.out, args.force)
    spec, dtype = problem_spec(args)
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
