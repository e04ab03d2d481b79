"""The vectorized fp32 -> fp16/bf16 rounding of the AVX-512 and AVX2 builds against the scalar
one.

The kernel rounds each accumulator once (the op's only rounding); AVX-512 builds do it 16 values
at a time (pypto_narrow16 in pypto/_kernels/kernel/pypto_convert.h; bf16 by vcvtneps2bf16 where
the level has AVX512_BF16), AVX2 builds 8 at a time (pypto_narrow8). A small C program runs
every fp32 bit pattern through both. Kept out of test_numerics.py, which test_levels.py re-runs
once per ISA level: this check does not depend on the level the kernel runs at.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

from pypto._kernels.dispatch import kernel_info
from support.slowdown import limit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.mark.skipif(not shutil.which("gcc"), reason="no C compiler")
@pytest.mark.parametrize(
    "level, flags",
    [
        ("avx512_bf16", ["-march=x86-64-v4", "-mavx512bf16"]),
        ("avx512", ["-march=x86-64-v4"]),
        ("avx2", ["-march=x86-64-v3"]),
    ],
)
def test_vector_narrowing_equals_the_scalar_one_on_every_fp32_pattern(tmp_path, level, flags):
    """All 2^32 fp32 patterns, fp16 and bf16: identical results (about 10 s per level). With
    AVX512_BF16, bf16 goes through vcvtneps2bf16, which takes fp32 subnormals for zero: those
    lanes must take the integer rounding."""
    if level not in kernel_info()["cpu_levels"]:
        pytest.skip(f"this CPU cannot run {level} code")
    exe = tmp_path / "narrow_exhaustive"
    subprocess.run(
        [
            "gcc",
            "-O2",
            *flags,
            "-ffp-contract=off",
            "-fno-math-errno",
            f"-I{ROOT / 'pypto' / '_kernels' / 'kernel'}",
            str(HERE / "c" / "narrow_exhaustive.c"),
            "-o",
            str(exe),
        ],
        check=True,
    )
    done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=limit(300))
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith("0 mismatches"), done.stdout
