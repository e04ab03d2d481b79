"""``python -m pypto``: run conv_backward_input and explain tiles from the command line.

- no command: the specification's example and a ResNet-size layer on random data;
- ``run --grad-output ... --weight ...``: a problem you give (tiles suggested unless given);
- ``tiles --grad-output ... --weight ... --l1 M,K,N --l0 M,K,N``: every NPU tile rule with its
  numbers, buffer use, loop counts, and the nearest legal tiles when a rule fails;
- ``info``: version, kernel build, threads;
- ``selfcheck``: the NPU kernel against the CPU on this device (exit 2 without an NPU);
- ``golden --grad-output ... --weight ... --out DIR``: a golden case for an NPU kernel: random
  inputs, the float64 golden, pypto's own result and a manifest (``pypto/_golden/files.py``);
- ``compare DIR --actual output.bin``: the kernel's result judged by CANN's accuracy standards
  (one verdict line each), where the errors are (image, channel block, M tile), the worst
  elements, and with ``--plot PATH`` a heatmap; exit code 0 when the chosen standard passes,
  1 when it fails;
- ``sweep CASES --out DIR``, ``sweep --merge DIR...``, ``sweep --judge DIR``: many cases.

Runs print shapes, tiles, time, GFLOP/s and the error against a float64 NumPy reference (in
units of the output dtype's ulp, and how many elements differ from the once-rounded value).
Bad arguments print one ``error:`` line and exit with code 2.

Each command is a module of this package with ``NAME``, ``add_parser(commands, common)`` (its
sub-parser) and ``handle(args)`` (its exit code); ``args.py`` and ``problem.py`` hold the
options several commands share. This module builds the parser and dispatches.
"""

import argparse
import os
import sys

import pypto

from . import compare, golden, info, run, selfcheck, sweep, tiles
from .args import add_dtype, common_parser

# the order of `pypto --help`
COMMANDS = (run, tiles, info, selfcheck, golden, compare, sweep)
HANDLERS = {None: run.examples, **{command.NAME: command.handle for command in COMMANDS}}


def build_parser():
    """The parser of ``python -m pypto`` and of every command."""
    common = common_parser()
    main_parser = argparse.ArgumentParser(
        prog="python -m pypto",
        parents=[common],
        description="Run pypto.conv_backward_input on built-in examples (no command), on a "
        "problem you give (run), explain a set of tiles (tiles), write a golden "
        "case for an NPU kernel (golden), judge its result (compare) or check the NPU kernel on "
        "this device (selfcheck).",
    )
    add_dtype(main_parser)
    commands = main_parser.add_subparsers(dest="command")
    for command in COMMANDS:
        command.add_parser(commands, common)
    return main_parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    # the defaults, for options given nowhere (not set_defaults: parents share the actions)
    args.threads = getattr(args, "threads", None)
    args.dtype_given = hasattr(args, "dtype")
    args.dtype = getattr(args, "dtype", "fp16")
    try:
        pypto.set_num_threads(args.threads)
        code = HANDLERS[args.command](args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return code
    except pypto.PyptoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`pypto | head`): no traceback, and none at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
