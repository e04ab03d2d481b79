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
