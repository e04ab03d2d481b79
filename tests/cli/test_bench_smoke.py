"""The benchmark runs (a seconds-long smoke run; it asserts nothing about speed)."""

import pathlib
import subprocess
import sys

import pytest

from support.slowdown import limit


def test_bench_quick_runs():
    done = subprocess.run(
        [sys.executable, "-m", "pypto.bench", "--quick"],
        capture_output=True,
        text=True,
        timeout=limit(600),
        cwd=pathlib.Path(__file__).resolve().parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("a    bf16") and "pypto" in line for line in lines)
    assert any(line.startswith("a    fp16") and "numpy fp32" in line for line in lines)


def test_bench_prints_the_measured_peak_of_the_level_in_use():
    done = subprocess.run(
        [sys.executable, "-m", "pypto.bench", "--quick", "--cases", "a", "--no-torch"],
        capture_output=True,
        text=True,
        timeout=limit(300),
        cwd=pathlib.Path(__file__).resolve().parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "measured peak of level" in done.stdout and "PEAK_PER_CORE" not in done.stdout


@pytest.mark.parametrize("features", [["avx512_bf16"], ["amx_bf16", "avx512_bf16"]])
def test_the_header_says_where_torch_runs_bf16_on_amx(monkeypatch, features):
    """Uncapped torch on a CPU with AMX-BF16 multiplies bf16 there in its own order: the
    header says so, and where pypto's tile order runs on the unit too; elsewhere, and when
    torch is capped to a forced level, it says nothing."""
    from pypto import bench

    amx = "amx_bf16" in features
    info = {"isa": "avx512_amx" if amx else "avx512", "cpu_features": features, "amx": amx}
    monkeypatch.delenv("PYPTO_CPU_ISA", raising=False)
    note = bench._torch_note(info)
    assert (note is not None and "AMX" in note) == amx
    if amx:
        assert "sum_order 'tile'" in note and "'pypto tile'" in note
        assert "not on this level" in bench._torch_note(dict(info, isa="avx512", amx=False))
    monkeypatch.setenv("PYPTO_CPU_ISA", "avx512")
    monkeypatch.setattr(bench.peers, "_cap_torch_to_level", lambda level: f"capped to {level}")
    assert bench._torch_note(info) == f"capped to {info['isa']}"


def test_peak_loops_count_their_flops_at_every_level_this_cpu_runs():
    """The flop count the benchmark divides by: 12 chains x the level's fp32 lanes x 2 per step
    (x 2 again for the bf16 dot product's pairs); the timing itself asserts nothing."""
    from pypto._kernels import dispatch as _cpu

    lanes = {"baseline": 4, "avx2": 8, "avx512": 16, "avx512_bf16": 16, "avx512_amx": 16}
    runnable = [level for level in _cpu.CPU_LEVELS if level in _cpu.BUILT_LEVELS]
    assert runnable
    for level in runnable:
        kernel = _cpu.load_level(level)
        flops, seconds = kernel.peak_flops("madd", 2, 1000)
        assert flops == 2 * 1000 * 12 * lanes[level] * 2 and seconds > 0
        dot, _ = kernel.peak_flops("bf16_dot", 1, 1000)
        assert dot == (1000 * 12 * 16 * 4 if kernel.HAS_BF16_DOT else 0)
    peak = _cpu.measure_peak_gflops(1, seconds=0.03)
    assert peak > 0
    assert (_cpu.measure_peak_gflops(1, "bf16_dot", seconds=0.03) is None) == (
        not _cpu.kernel_info()["bf16_dot"]
    )
    for bad in (0, 2.0, "2", _cpu._config.MAX_THREADS + 1):
        with pytest.raises(ValueError):
            _cpu.measure_peak_gflops(bad)
    with pytest.raises(ValueError):
        _cpu.measure_peak_gflops(1, "fp64")


def test_the_peak_kept_is_the_higher_of_two_measurements(monkeypatch, capsys):
    """A busy host can only pull a peak measurement down: the benchmark keeps the higher of the
    measurements before and after the cases, and every row's share uses it."""
    from pypto import bench

    monkeypatch.setattr(
        bench.timing,
        "measure_peaks",
        lambda threads: {
            1: {"fp32": 100.0, "bf16_dot": None},
            2: {"fp32": 150.0, "bf16_dot": None},
        },
    )
    peaks = {1: {"fp32": 80.0, "bf16_dot": None}, 2: {"fp32": 190.0, "bf16_dot": None}}
    rows = [
        {
            "dtype": "bf16",
            "threads": 1,
            "gflops": 50.0,
            "peak_gflops": 80.0,
            "peak_kind": "fp32 multiply-add",
            "peak_pct": 62.5,
        },
        {
            "dtype": "fp16",
            "threads": 2,
            "gflops": 95.0,
            "peak_gflops": 190.0,
            "peak_kind": "fp32 multiply-add",
            "peak_pct": 50.0,
        },
    ]
    bench._remeasure_peaks(peaks, rows)
    assert peaks[1]["fp32"] == 100.0 and peaks[2]["fp32"] == 190.0
    assert [r["peak_gflops"] for r in rows] == [100.0, 190.0]
    assert [r["peak_pct"] for r in rows] == [50.0, 50.0]
    assert "kept 100" in capsys.readouterr().out


# --- the command line: a bad value is a usage error before any case runs -----------------------


@pytest.mark.parametrize(
    "argv, text",
    [
        (["--dtypes", "fp32"], "unknown dtype(s) fp32"),
        (["--dtypes", ","], "no dtype"),
        (["--cases", "a,z"], "unknown case(s) z"),
        (["--threads", "abc"], "expected comma-separated ints"),
        (["--threads", "1,,2"], "expected comma-separated ints"),
        (["--threads", "0"], "a thread count must be in [1, 1024], not 0"),
        (["--threads", "1025"], "not 1025"),
        (["--rounds", "0"], "argument --rounds: expected an int >= 1"),
        (["--rounds", "-3"], "argument --rounds: expected an int >= 1"),
        (["--rounds", "2.5"], "argument --rounds: expected an int >= 1"),
        (["--budget", "nan"], "argument --budget: expected a number of seconds >= 0"),
        (["--budget", "-1"], "argument --budget: expected a number of seconds >= 0"),
        (["--budget", "inf"], "argument --budget: expected a number of seconds >= 0"),
        (["--json", "/nonexistent/r.json"], "--json: cannot write /nonexistent/r.json"),
        (["--json", ""], "--json: '' is no file name"),
        (["--json", "."], "--json: . is a folder"),
        (["--plot", "r.jpg2"], "--plot: "),
        (["--plot", ""], "--plot: "),
        (["--plot", "/nonexistent/r.png"], "--plot: "),
        (["--plot", "."], "--plot: "),
        (["--quick", "--json", "/nonexistent/r.json"], "--json: cannot write"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_bad_arguments_are_usage_errors_before_any_case_runs(
    argv, text, monkeypatch, capsys, tmp_path
):
    from pypto import bench

    def ran(*args, **kwargs):
        raise AssertionError("the benchmark started before the bad argument was refused")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench, "run", ran)
    monkeypatch.setattr(bench, "measure_peaks", ran)
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("usage: python -m pypto.bench"), err
    assert text in err, err
    assert list(tmp_path.iterdir()) == []


def test_good_arguments_are_parsed(tmp_path):
    from pypto import bench

    args = bench.parse_args(
        [
            "--cases",
            "b, a,b",
            "--dtypes",
            "fp16",
            "--threads",
            "2,1,2",
            "--rounds",
            "4",
            "--budget",
            "0",
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    assert (args.cases, args.dtypes, args.threads) == (["b", "a"], ["fp16"], [2, 1])
    assert (args.rounds, args.budget, args.json) == (4, 0.0, str(tmp_path / "r.json"))
    defaults = bench.parse_args([])
    assert defaults.cases == list(bench.CASES) and defaults.dtypes == ["bf16", "fp16"]
    assert defaults.threads == [1, 2] and (defaults.rounds, defaults.budget) == (15, 6.0)
    assert bench.parse_args(["--networks"]).rounds == 9  # three blocks of three calls
    quick = bench.parse_args(["--quick", "--threads", "2"])
    assert (quick.cases, quick.threads, quick.rounds) == (["a", "c", "f"], [1], 3)


def test_a_write_that_fails_after_the_run_is_one_error_line(monkeypatch, capsys, tmp_path):
    """The paths are checked before the run; a write that still fails (a full disk, say) costs
    only its own output: an error line, exit 1, and the plot is written all the same."""
    pytest.importorskip("matplotlib")
    from pypto import bench

    rows = [
        {
            "case": "b",
            "dtype": "fp16",
            "threads": 1,
            "peer": peer,
            "ms": 1.0,
            "gflops": 10.0,
            "ratio": 1.0,
            "peak_gflops": 100.0,
            "peak_kind": "fp32 multiply-add",
            "peak_pct": 10.0,
        }
        for peer in ("pypto", "x")
    ]
    monkeypatch.setattr(bench, "run", lambda *args, **kwargs: (rows, {1: {"fp32": 100.0}}))

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bench, "write_json", full_disk)
    plot = tmp_path / "r.png"
    code = bench.main(
        ["--cases", "b", "--threads", "1", "--json", str(tmp_path / "r.json"), "--plot", str(plot)]
    )
    err = capsys.readouterr().err
    assert code == 1 and "error: cannot write" in err and "No space left" in err
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_a_bad_argument_from_the_command_line_is_no_traceback():
    done = subprocess.run(
        [sys.executable, "-m", "pypto.bench", "--threads", "abc"],
        capture_output=True,
        text=True,
        timeout=limit(120),
        cwd=pathlib.Path(__file__).resolve().parent,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "argument --threads: expected comma-separated ints" in done.stderr
