"""The CPU kernel's ISA levels: how each is compiled and what the running CPU must have for it.

The one table of levels. setup.py loads this file by path to compile one kernel module per level
(``pypto._kernels.kernel.dgrad_<name>``); pypto._kernels.dispatch uses it to decide, from the
features that the baseline-built ``pypto._kernels.features`` reads off the CPU (CPUID and XGETBV on
x86, the kernel's HWCAP words on AArch64), which levels may be imported at all. A level's module is
never imported on a CPU that lacks one of its ``requires``: its code, module initialisation
included, is compiled with ``flags`` and may use any instruction they allow.

``requires`` lists everything the flags let the compiler emit (``-march=x86-64-v3`` means the
whole x86-64-v3 set, not only AVX2), plus the operating-system state the registers need
(``os_avx``: XCR0 has the SSE and AVX state; ``os_avx512``: also the opmask and ZMM state;
``os_amx``: also the tile configuration and tile data state).
"""

from collections import namedtuple

IsaLevel = namedtuple("IsaLevel", "name flags requires arch")

# x86-64-v2: what -march=x86-64-v3 assumes beneath AVX.
_X86_64_V2 = ("cx16", "lahf_lm", "popcnt", "sse3", "ssse3", "sse4_1", "sse4_2")
_X86_64_V3 = _X86_64_V2 + (
    "avx",
    "avx2",
    "bmi1",
    "bmi2",
    "f16c",
    "fma",
    "lzcnt",
    "movbe",
    "osxsave",
    "os_avx",
)
_X86_64_V4 = _X86_64_V3 + ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "os_avx512")

# Best last. "baseline" is the architecture's default target: SSE2 on x86-64, NEON on AArch64.
LEVELS = (
    IsaLevel("baseline", (), (), "any"),
    IsaLevel("avx2", ("-march=x86-64-v3",), _X86_64_V3, "x86_64"),
    IsaLevel("avx512", ("-march=x86-64-v4",), _X86_64_V4, "x86_64"),
    IsaLevel(
        "avx512_bf16", ("-march=x86-64-v4", "-mavx512bf16"), _X86_64_V4 + ("avx512_bf16",), "x86_64"
    ),
    # avx512 plus the tile unit, which only sum_order "tile" uses, and only once the OS has
    # granted this process tile data (asked at the first such call) and the self-check passed
    IsaLevel(
        "avx512_amx",
        ("-march=x86-64-v4", "-mamx-tile", "-mamx-bf16"),
        _X86_64_V4 + ("amx_tile", "amx_bf16", "os_amx"),
        "x86_64",
    ),
)

# Levels a CPU runs but that are slower there than the level below them, so that the default
# choice passes them over (PYPTO_CPU_ISA still picks them): level -> (the feature that marks
# such CPUs, why). Measured with the kernel's own peak loop (docs/performance-log.md, "An
# Intel host with AMX: Sapphire Rapids class"): there vdpbf16ps ran at half the fp32 FMA's
# rate (bf16 dot 215 GFLOP/s, fp32 multiply-add 428 on 2 cores), and bf16 networks ran
# 1.2-1.3x faster on the avx512 level's fp32 path. AMX-BF16 marks Intel's Sapphire Rapids and
# later; AMD's Zen 4 and Zen 5, without it, run vdpbf16ps at twice their FMA's rate.
PASSED_OVER = {
    "avx512_bf16": (
        "amx_bf16",
        "on CPUs with AMX-BF16 (Intel Sapphire Rapids and later) its bf16 dot product runs at "
        "half the fp32 multiply-add's rate, so avx512's fp32 path is faster",
    ),
}

LEVEL_NAMES = tuple(level.name for level in LEVELS)
BY_NAME = {level.name: level for level in LEVELS}


def levels_for(machine):
    """The levels that exist for a machine (``platform.machine()``), best last."""
    arch = "x86_64" if machine.lower() in ("x86_64", "amd64") else machine.lower()
    return tuple(level for level in LEVELS if level.arch in ("any", arch))


def passed_over(level, features):
    """Why the default choice passes ``level`` over on a CPU with ``features``, or None."""
    marker, why = PASSED_OVER.get(level, (None, None))
    return why if marker is not None and features.get(marker) else None


def missing_features(level, features):
    """The features ``level`` needs that ``features`` (name -> bool) does not have, in order."""
    return [name for name in BY_NAME[level].requires if not features.get(name)]
