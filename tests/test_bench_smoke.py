"""The benchmark runs (a seconds-long smoke run; it asserts nothing about speed)."""

import pathlib
import subprocess
import sys

from _slowdown import limit


def test_bench_quick_runs():
    done = subprocess.run([sys.executable, "-m", "pypto.bench", "--quick"], capture_output=True,
                          text=True, timeout=limit(600),
                          cwd=pathlib.Path(__file__).resolve().parent)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("a    bf16") and "pypto" in line for line in lines)
    assert any(line.startswith("a    fp16") and "numpy fp32" in line for line in lines)


def test_bench_prints_the_measured_peak_of_the_level_in_use():
    done = subprocess.run([sys.executable, "-m", "pypto.bench", "--quick", "--cases", "a",
                           "--no-torch"], capture_output=True, text=True, timeout=limit(300),
                          cwd=pathlib.Path(__file__).resolve().parent)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "measured peak of level" in done.stdout and "PEAK_PER_CORE" not in done.stdout


def test_peak_loops_count_their_flops_at_every_level_this_cpu_runs():
    """The flop count the benchmark divides by: 12 chains x the level's fp32 lanes x 2 per step
    (x 2 again for the bf16 dot product's pairs); the timing itself asserts nothing."""
    import pytest

    from pypto import _cpu
    lanes = {"baseline": 4, "avx2": 8, "avx512": 16, "avx512_bf16": 16}
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
        not _cpu.kernel_info()["bf16_dot"])
    for bad in (0, 2.0, "2", _cpu._config.MAX_THREADS + 1):
        with pytest.raises(ValueError):
            _cpu.measure_peak_gflops(bad)
    with pytest.raises(ValueError):
        _cpu.measure_peak_gflops(1, "fp64")


def test_the_peak_kept_is_the_higher_of_two_measurements(monkeypatch, capsys):
    """A busy host can only pull a peak measurement down: the benchmark keeps the higher of the
    measurements before and after the cases, and every row's share uses it."""
    from pypto import bench

    monkeypatch.setattr(bench, "measure_peaks",
                        lambda threads: {1: {"fp32": 100.0, "bf16_dot": None},
                                         2: {"fp32": 150.0, "bf16_dot": None}})
    peaks = {1: {"fp32": 80.0, "bf16_dot": None}, 2: {"fp32": 190.0, "bf16_dot": None}}
    rows = [{"dtype": "bf16", "threads": 1, "gflops": 50.0, "peak_gflops": 80.0,
             "peak_kind": "fp32 multiply-add", "peak_pct": 62.5},
            {"dtype": "fp16", "threads": 2, "gflops": 95.0, "peak_gflops": 190.0,
             "peak_kind": "fp32 multiply-add", "peak_pct": 50.0}]
    bench._remeasure_peaks(peaks, rows)
    assert peaks[1]["fp32"] == 100.0 and peaks[2]["fp32"] == 190.0
    assert [r["peak_gflops"] for r in rows] == [100.0, 190.0]
    assert [r["peak_pct"] for r in rows] == [50.0, 50.0]
    assert "kept 100" in capsys.readouterr().out
