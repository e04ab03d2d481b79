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
from support.reference import round_once
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


@pytest.mark.parametrize("level", RUNNABLE)
@pytest.mark.parametrize("subnormal_in", ["dy", "w"])
def test_subnormal_input_against_large_partner_at_every_level(level, subnormal_in):
    """A bf16 subnormal against a partner of |x| >= 2^15 passes the least-exponent sum (>= 142)
    but the dot product's DAZ would read it as zero: the kernel must take the IEEE path, and
    the result is the one exact product, rounded once."""
    kernel = load_level(level)
    rng = np.random.default_rng(43)
    dy = np.zeros((1, 16, 4, 8), ml_dtypes.bfloat16)
    large = rng.uniform(2.0**15, 2.0**16, (16, 16, 1, 1)) * rng.choice([-1, 1], (16, 16, 1, 1))
    w = large.astype(ml_dtypes.bfloat16)
    tiny = np.uint16(0x0041).view(ml_dtypes.bfloat16)  # 65 * 2^-133
    if subnormal_in == "dy":
        dy[0, 0, 0, 0] = tiny
    else:  # w subnormal in column (co 0, ci 0..3), dy large where that column reads it
        dy[0, 0, 0, 0] = ml_dtypes.bfloat16(2.0**15 * 1.5)
        w[0, :4, 0, 0] = tiny
    path, out = _kernel_call(kernel, dy, w, True)
    assert not path.startswith("bf16_dot"), path
    exact = dy.astype(np.float64)[0, 0, 0, 0] * w.astype(np.float64)[0, :, 0, 0]
    got = out.view(ml_dtypes.bfloat16)[0, :, 0, 0].astype(np.float64)
    assert np.abs(exact).min() > 0
    np.testing.assert_array_equal(got, round_once(exact, ml_dtypes.bfloat16).astype(np.float64))


def _mxcsr_access():
    """(get, set) of this thread's MXCSR through two 4-byte functions in an executable page
    (stmxcsr/ldmxcsr [rdi]; ret): what an extension built with -ffast-math leaves behind."""
    import ctypes
    import mmap

    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(bytes([0x0F, 0xAE, 0x1F, 0xC3, 0x0F, 0xAE, 0x17, 0xC3]))
    base = ctypes.addressof(ctypes.c_char.from_buffer(page))
    proto = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_uint32))
    store, load = proto(base), proto(base + 4)

    def get():
        value = ctypes.c_uint32()
        store(ctypes.byref(value))
        return value.value

    def put(value):
        load(ctypes.byref(ctypes.c_uint32(value)))

    return get, put, page


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "AMD64"), reason="MXCSR is x86-64's")
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_callers_flush_to_zero_does_not_change_bits(dtype):
    """A thread with FTZ|DAZ set (another library's fast-math) calls pypto: the same bits as
    with IEEE arithmetic, subnormal inputs and sums included, and the caller's MXCSR as it
    was."""
    import pypto
    from support.numerics import call_op, make_problem, run_op

    get, put, _page = _mxcsr_access()
    prob = make_problem(2, 8, 40, 6, 7, 3, 3, pads=(1, 1))
    rng = np.random.default_rng(7)
    tiny = 2.0**-128 if dtype is ml_dtypes.bfloat16 else 2.0**-20  # subnormal inputs and sums
    dy = (rng.standard_normal((2, 40, 6, 7)) * tiny).astype(dtype)
    w = rng.standard_normal((40, 8, 3, 3)).astype(dtype)
    w[::3] *= dtype(2.0**-6)
    clean = run_op(prob, dy, w).view(np.uint16)  # sets the suggested tiles
    assert np.count_nonzero(clean) > 100
    saved = get()
    try:
        put(saved | 0x8040)  # FTZ (bit 15) and DAZ (bit 6)
        flushed_env = get()
        for threads in (1, 2):
            with pypto.options(num_threads=threads):
                got = call_op(prob, dy, w).numpy().view(np.uint16)
            assert get() == flushed_env
            np.testing.assert_array_equal(got, clean)
    finally:
        put(saved)
