"""Every ISA level this machine runs gives correct numbers; the bf16 dot product is used only
where it is exact; PYPTO_CPU_ISA is honoured and checked."""

import os
import pathlib
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from pypto._kernels.dispatch import BUILT_LEVELS, CPU_LEVELS, kernel_info, load_level
from support.slowdown import limit

HERE = pathlib.Path(__file__).resolve().parent
RUNNABLE = [level for level in CPU_LEVELS if level in BUILT_LEVELS]


def _run(code_or_args, level):
    env = dict(os.environ, PYPTO_CPU_ISA=level)
    return subprocess.run(
        [sys.executable, *code_or_args],
        capture_output=True,
        text=True,
        env=env,
        cwd=HERE,
        timeout=limit(600),
    )


@pytest.mark.parametrize("level", [lv for lv in RUNNABLE if lv != kernel_info()["isa"]])
def test_numerics_suite_passes_at_level(level):
    """The accuracy tests, re-run in a process forced to ``level`` (the default level runs them
    in this process already)."""
    done = _run(
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE / "test_numerics.py")], level
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout


@pytest.mark.parametrize("level", RUNNABLE)
def test_forced_level_is_used(level):
    done = _run(
        ["-c", "from pypto._kernels.dispatch import kernel_info; print(kernel_info()['isa'])"],
        level,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == level


def test_unknown_level_is_a_clear_error():
    done = _run(["-m", "pypto", "info"], "sse9")
    assert done.returncode == 2
    assert "PYPTO_CPU_ISA='sse9'" in done.stderr and "expected one of" in done.stderr


def _kernel_call(kernel, dy, w, use_dot):
    out = np.empty((dy.shape[0], w.shape[1], dy.shape[2], dy.shape[3]), np.uint16)
    path = kernel.dgrad(
        dy.view(np.uint16),
        w.view(np.uint16),
        out,
        1,
        (1, 1, 0, 0, 1, 1),
        (dy.shape[2], dy.shape[3], 16, 16, 32, 16, 16),
        (16, 16),
        1,
        use_dot,
    )
    return path, out


@pytest.mark.skipif("avx512_bf16" not in RUNNABLE, reason="no AVX512_BF16 on this CPU")
def test_bf16_dot_path_only_where_exact():
    kernel = load_level("avx512_bf16")
    rng = np.random.default_rng(3)
    dy = rng.uniform(-1, 1, (1, 16, 4, 8)).astype(ml_dtypes.bfloat16)
    w = rng.uniform(-1, 1, (16, 16, 1, 1)).astype(ml_dtypes.bfloat16)
    path, dot = _kernel_call(kernel, dy, w, True)
    assert path.startswith("bf16_dot")
    path, plain = _kernel_call(kernel, dy, w, False)
    assert path == "fp32"
    # same sums, pairwise order: equal or one ulp apart
    assert np.abs(dot.astype(np.int32) - plain.astype(np.int32)).max() <= 1
    # a product below 2^-126 would be flushed by the instruction: the kernel must not use it
    tiny = dy.copy()
    tiny[0, 0, 0, 0] = ml_dtypes.bfloat16(2.0**-120)
    assert _kernel_call(kernel, tiny, w, True)[0] == "fp32"
    subnormal = dy.copy()
    subnormal[0, 0, 0, 1] = np.uint16(0x0001).view(ml_dtypes.bfloat16)
    assert _kernel_call(kernel, subnormal, w, True)[0] == "fp32"


@pytest.mark.skipif("avx512_bf16" not in RUNNABLE, reason="no AVX512_BF16 on this CPU")
@pytest.mark.parametrize("least_dy", [1, 15, 20, 70, 126])
def test_bf16_dot_path_threshold_on_least_exponents(least_dy):
    """The dot product is used exactly when the least biased exponents of dy's and w's nonzero
    values (zeros, signs and large values aside) sum to at least 142."""
    kernel = load_level("avx512_bf16")
    rng = np.random.default_rng(least_dy)
    dy = rng.uniform(1, 2, (1, 16, 4, 8)).astype(ml_dtypes.bfloat16)  # exponent 127
    w = rng.uniform(-2, -1, (16, 16, 1, 1)).astype(ml_dtypes.bfloat16)
    dy[0, 1], w[2, 3] = 0, 0  # zeros never count
    dy[0, 2, 1, 1] = ml_dtypes.bfloat16(-(2.0**100))  # large values neither
    dy[0, 3, 2, 2] = ml_dtypes.bfloat16(-1.5 * 2.0 ** (least_dy - 127))
    for least_w in (142 - least_dy - 1, 142 - least_dy, 142 - least_dy + 1):
        if not 1 <= least_w <= 126:
            continue
        w_case = w.copy()
        w_case[4, 5] = ml_dtypes.bfloat16(1.75 * 2.0 ** (least_w - 127))
        path, _ = _kernel_call(kernel, dy, w_case, True)
        assert path.startswith("bf16_dot") == (least_dy + least_w >= 142), (least_dy, least_w)
    path, _ = _kernel_call(kernel, dy, w, True)  # w's least exponent is 127
    assert path.startswith("bf16_dot") == (least_dy + 127 >= 142)
