"""python -m pypto: commands, arguments, bad arguments and exit codes."""

import pathlib
import subprocess
import sys

import pytest

from support.slowdown import limit

HERE = pathlib.Path(__file__).resolve().parent


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "pypto", *args],
        capture_output=True,
        text=True,
        timeout=limit(300),
        cwd=HERE,
    )


PROBLEM = [
    "--grad-output",
    "2,32,7,7",
    "--weight",
    "32,24,3,3",
    "--strides",
    "2,2",
    "--paddings",
    "1,1,1,1",
]


def test_run_checks_a_given_problem():
    done = _cli("run", *PROBLEM, "--dtype", "bf16", "--threads", "1")
    assert done.returncode == 0, done.stderr
    assert "input_size [2, 24, 13, 13]" in done.stdout  # the smallest valid size by default
    assert "check against the float64 reference: passed" in done.stdout


def test_run_with_given_tiles_and_size():
    done = _cli(
        "run",
        *PROBLEM,
        "--input-size",
        "2,24,14,14",
        "--l1",
        "14,144,16",
        "--l0",
        "16,16,16",
        "--vec",
        "16,16,1,16,16",
    )
    assert done.returncode == 0, done.stderr
    assert (
        "tiles L1 (M, K, N) = (14, 144, 16), L0 = (16, 16, 16), vec = [16, 16, 1, 16, 16]"
        in done.stdout
    )


@pytest.mark.parametrize(
    "args, text",
    [
        (["run", *PROBLEM, "--strides", "0,2"], "strides must be in the range [1,63]"),
        (["run", *PROBLEM, "--input-size", "2,24,20,13"], "input_size[2] must be in [13, 14]"),
        (["run", *PROBLEM, "--l1", "13,140,16", "--l0", "16,16,16"], "Invalid tileKL1:140"),
        (["run", *PROBLEM, "--l1", "16,144"], "--l1 takes 3 ints"),
        (["--threads", "0"], "num_threads must be None or an int in [1, 1024], but got 0"),
        # the op refuses these problems: so does `pypto tiles`, with the op's message
        (
            [
                "tiles",
                "--grad-output",
                "1,16,8,8",
                "--weight",
                "16,16,3,3",
                "--input-size",
                "1,16,4,4",
                "--paddings",
                "3,3,3,3",
            ],
            "must be > padding",
        ),
        (
            [
                "tiles",
                "--grad-output",
                "1,16,5,32",
                "--weight",
                "16,16,3,3",
                "--paddings",
                "1,1,0,2",
            ],
            "Only symmetric padding is supported",
        ),
        (
            [
                "tiles",
                "--grad-output",
                "1,16,5,32",
                "--weight",
                "32,16,3,3",
                "--paddings",
                "1,1,1,1",
            ],
            "is not equal to Cout of weight",
        ),
        (
            [
                "tiles",
                "--grad-output",
                "1,16,5,32",
                "--weight",
                "16,16,3,3",
                "--input-size",
                "1,16,0,32",
                "--paddings",
                "1,1,1,1",
            ],
            "input must be in the range [1,1000000]",  # upstream f121cb47 names it input
        ),
    ],
)
def test_validation_errors_are_one_line_and_exit_2(args, text):
    done = _cli(*args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], done.stderr


def test_unparsable_argument_is_a_usage_error():
    done = _cli("run", "--grad-output", "2,a", "--weight", "1")
    assert done.returncode == 2 and "expected comma-separated ints" in done.stderr
    assert "Traceback" not in done.stderr


def test_tiles_explains_and_exit_code_says_legal():
    legal = _cli(
        "tiles",
        "--grad-output",
        "1,16,5,32",
        "--weight",
        "16,16,3,3",
        "--paddings",
        "1,1,1,1",
        "--l1",
        "16,144,16",
        "--l0",
        "16,16,16",
    )
    assert legal.returncode == 0, legal.stderr
    assert "verdict: legal on Atlas A2/A3" in legal.stdout
    assert "L1        6336 /  524288 bytes" in legal.stdout
    illegal = _cli(
        "tiles",
        "--grad-output",
        "1,16,5,32",
        "--weight",
        "16,16,3,3",
        "--paddings",
        "1,1,1,1",
        "--l1",
        "16,140,16",
        "--l0",
        "16,16,16",
    )
    assert illegal.returncode == 1
    assert "TS3  FAIL" in illegal.stdout
    assert "nearest legal tiles: ConvBpTileL1Info(16, 144, 16)" in illegal.stdout


def test_info():
    done = _cli("info")
    assert done.returncode == 0 and "cpu kernel: ISA" in done.stdout
    assert "npu: " in done.stdout and "backend requested: auto" in done.stdout
    assert "bf16 sum order: tile" in done.stdout and "order 'tile' here: " in done.stdout


def test_info_says_the_sum_order_and_refuses_a_bad_one(monkeypatch):
    monkeypatch.setenv("PYPTO_SUM_ORDER", "sequential")
    assert "bf16 sum order: sequential" in _cli("info").stdout
    monkeypatch.setenv("PYPTO_SUM_ORDER", "fastest")
    done = _cli("info")
    assert done.returncode == 2 and "PYPTO_SUM_ORDER must be one of" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("before", [True, False], ids=["before the command", "after it"])
def test_options_count_before_and_after_the_command(before):
    options = ["--threads", "1", "--dtype", "bf16"]
    args = [*options, "run", *PROBLEM] if before else ["run", *PROBLEM, *options]
    done = _cli(*args)
    assert done.returncode == 0, done.stderr
    run_line = next(line for line in done.stdout.splitlines() if line.startswith("run: "))
    assert "1 thread(s)" in done.stdout and run_line.endswith(", bf16"), done.stdout
    info = _cli(*(["--threads", "1", "info"] if before else ["info", "--threads", "1"]))
    assert "1 thread(s)" in info.stdout


def test_run_checks_memory_before_drawing_random_data():
    done = _cli(
        "run",
        "--grad-output",
        "64,1024,1000,1000",
        "--weight",
        "1024,1024,3,3",
        "--paddings",
        "1,1,1,1",
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: ErrCode: F00003, MemoryError: ")
    assert "random inputs and the float64 check" in done.stderr


@pytest.mark.parametrize("seed", ["-1", "x", "1,2"])
def test_bad_seed_is_a_usage_error(seed):
    done = _cli("run", *PROBLEM, "--seed", seed)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (
        "--seed: expected an int >= 0" in done.stderr
        or "expected comma-separated ints" in done.stderr
    )


def test_a_closed_pipe_ends_quietly():
    reader = subprocess.Popen(
        [sys.executable, "-m", "pypto", "info"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=HERE,
    )
    reader.stdout.close()  # nobody reads: the first write or the flush meets EPIPE
    _, err = reader.communicate(timeout=limit(120))
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err
    assert reader.returncode in (0, 1)


def test_tiles_without_any_legal_tiles_explains_the_smallest_and_names_the_rule():
    done = _cli(
        "tiles",
        "--grad-output",
        "1,16,40,40",
        "--weight",
        "16,16,63,63",
        "--input-size",
        "1,16,102,102",
    )
    assert done.returncode == 1, done.stderr
    assert "TS6  FAIL" in done.stdout and "verdict: NOT legal" in done.stdout
    assert "No L1/L0 tiles satisfy the NPU's rules for this problem" in done.stdout
    assert "break TS6: MinL1LoadSize > L1size" in done.stdout
