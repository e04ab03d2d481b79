"""The arguments several commands share: the number converters for ``type=``, the options
valid before and after the command (``--threads``, ``--dtype``) and ``--seed``."""

import argparse


def ints(text):
    """Comma-separated ints ("2,32,7,7"); spaces and empty items are ignored."""
    try:
        return [int(v) for v in text.replace(" ", "").split(",") if v != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}") from None


def natural(text):
    """An int >= 0 (a seed, a count)."""
    value = ints(text)
    if len(value) != 1 or value[0] < 0:
        raise argparse.ArgumentTypeError(f"expected an int >= 0, got {text!r}")
    return value[0]


def positive(text):
    """An int >= 1 (a count of jobs)."""
    value = ints(text)
    if len(value) != 1 or value[0] < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}")
    return value[0]


def seconds(text):
    """A finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def common_parser():
    """The parent parser of the main parser and of every command: its options are valid before
    and after the command."""
    # The default is SUPPRESS, so a value given before the command is not overwritten by the
    # command's copy; main fills in the real default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--threads",
        type=int,
        default=argparse.SUPPRESS,
        help="CPU threads (default: OMP_NUM_THREADS or all CPUs)",
    )
    return common


def add_dtype(parser, help="default fp16"):
    """--dtype fp16|bf16; SUPPRESS as --threads, and so main can tell whether it was given."""
    parser.add_argument("--dtype", choices=["fp16", "bf16"], default=argparse.SUPPRESS, help=help)


def add_seed(parser):
    """--seed, the seed of the random inputs."""
    parser.add_argument("--seed", type=natural, default=0, help="random data seed, an int >= 0")
