"""The CPU dispatch rule: no code built above the baseline is loaded before the CPU check says
the level runs, and the feature table reads the CPU right.

The proof on CPUs this machine is not (no AVX2, no AVX-512, AArch64) runs in .ci/run under
QEMU (tools/cross_cpu.py); these tests check the rule's parts on the machine at hand.
"""

import json
import os
import pathlib
import platform
import subprocess
import sys

import pytest

from pypto._kernels import levels as isa_levels
from pypto._kernels import loading as cpu
from pypto._kernels.dispatch import BUILT_LEVELS, CPU_FEATURES, CPU_LEVELS, kernel_info
from support.cpuinfo import cpuinfo_flags
from support.slowdown import limit

# not the checkout's root, where the source tree would shadow the installed package
HERE = pathlib.Path(__file__).resolve().parent


def _python(code, **env):
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, **env),
        timeout=limit(300),
        cwd=HERE,
    )


def _loaded_kernels_after(code, **env):
    done = _python(
        code + "\nimport sys, json\nprint(json.dumps(sorted(m for m in sys.modules "
        "if m.startswith('pypto._kernels.kernel.dgrad_'))))",
        **env,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


_ONE_CALL = """
import numpy as np, pypto
dy = pypto.from_numpy(np.ones((1, 16, 4, 4), np.float16))
w = pypto.from_numpy(np.ones((16, 16, 3, 3), np.float16))
pypto.set_convbp_input_tile_shapes(pypto.pypto_impl.ConvBpTileL1Info(16, 144, 16),
                                   pypto.pypto_impl.ConvBpTileL0Info(16, 16, 16))
pypto.set_vec_tile_shapes(16, 16, 16, 16)
pypto.conv_backward_input(dy, [1, 16, 4, 4], w, pypto.DT_FP16, [1, 1], [1, 1, 1, 1], [1, 1])
"""


def test_import_loads_no_kernel_module():
    """`import pypto` and `pypto --help` run no kernel module's code at all."""
    assert _loaded_kernels_after("import pypto, pypto._kernels.dispatch, pypto._cli") == []


@pytest.mark.parametrize("level", [lv for lv in CPU_LEVELS if lv in BUILT_LEVELS])
def test_only_the_chosen_level_is_loaded(level):
    assert _loaded_kernels_after(_ONE_CALL, PYPTO_CPU_ISA=level) == [
        f"pypto._kernels.kernel.dgrad_{level}"
    ]


def test_default_is_the_best_runnable_level():
    runnable = [lv for lv in CPU_LEVELS if lv in BUILT_LEVELS]
    chosen = [lv for lv in runnable if not isa_levels.passed_over(lv, CPU_FEATURES)]
    assert kernel_info()["isa"] == chosen[-1]
    assert kernel_info()["reason"].startswith("the best level")


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 levels")
@pytest.mark.parametrize("amx", ["none", "bf16 only", "tiles"])
def test_a_level_passed_over_is_not_the_default_but_can_be_forced(monkeypatch, amx):
    """On a CPU that runs every level, avx512_bf16 is the default unless the CPU carries the
    mark of a slow dot product (AMX-BF16); then avx512_amx where the tile unit is usable, else
    avx512. PYPTO_CPU_ISA still selects avx512_bf16 there."""
    everything = {f: True for lv in isa_levels.LEVELS for f in lv.requires}
    features = dict(everything, amx_bf16=amx != "none", os_amx=amx == "tiles")
    monkeypatch.setattr(cpu, "CPU_FEATURES", features)
    monkeypatch.setattr(cpu, "BUILT_LEVELS", isa_levels.LEVEL_NAMES)
    level, why = cpu.choose("")
    if amx == "none":
        assert (level, why) == (
            "avx512_bf16",
            "the best level built and supported by this CPU; avx512_amx: the CPU (or OS) lacks "
            "amx_bf16, os_amx",
        )
    else:
        assert level == ("avx512_amx" if amx == "tiles" else "avx512")
        assert why.startswith("the best level built and supported by this CPU; ")
        assert "avx512_bf16 runs but is passed over" in why
        assert "PYPTO_CPU_ISA=avx512_bf16" in why
        assert ("os_amx" in why) == (amx == "bf16 only")
    assert cpu.choose("avx512_bf16") == ("avx512_bf16", "PYPTO_CPU_ISA=avx512_bf16")


def test_a_level_the_cpu_lacks_is_refused_before_its_code_loads():
    """With the feature table emptied (a CPU with nothing above the baseline), every x86 level
    is refused with a PyptoRtError naming what is missing, and its module is never imported."""
    higher = [lv for lv in BUILT_LEVELS if lv != "baseline"]
    if not higher:
        pytest.skip("only the baseline level is built here")
    code = f"""
import sys, pypto._kernels.loading as cpu
from pypto.error import PyptoRtError
cpu.CPU_FEATURES = {{}}
for level in {higher!r}:
    try:
        cpu.load_level(level)
    except PyptoRtError as exc:
        assert "lacks" in str(exc) and "avx" in str(exc), exc
    else:
        raise SystemExit(level + " was loaded")
print(sorted(m for m in sys.modules if m.startswith("pypto._kernels.kernel.dgrad_")))
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_forced_level_the_cpu_lacks_is_a_clear_error():
    absent = [lv for lv in isa_levels.LEVEL_NAMES if lv not in CPU_LEVELS]
    if not absent:
        pytest.skip("this CPU runs every level")
    done = subprocess.run(
        [sys.executable, "-m", "pypto", "info"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYPTO_CPU_ISA=absent[0]),
        timeout=limit(300),
        cwd=HERE,
    )
    assert done.returncode == 2
    assert f"PYPTO_CPU_ISA={absent[0]!r} cannot be used here" in done.stderr
    assert "Traceback" not in done.stderr


def test_every_level_requires_what_its_flags_allow():
    """x86-64-v3 is more than AVX2 (BMI, LZCNT, MOVBE, F16C, FMA, the v2 set); v4 adds the
    AVX-512 subsets and the OS's ZMM state. Each level needs everything the one below needs."""
    by_name = isa_levels.BY_NAME
    assert set(by_name["avx2"].requires) >= {
        "avx2",
        "fma",
        "f16c",
        "bmi1",
        "bmi2",
        "lzcnt",
        "movbe",
        "os_avx",
        "sse4_2",
        "popcnt",
    }
    assert set(by_name["avx512"].requires) >= set(by_name["avx2"].requires) | {
        "avx512f",
        "avx512bw",
        "avx512cd",
        "avx512dq",
        "avx512vl",
        "os_avx512",
    }
    assert set(by_name["avx512_bf16"].requires) >= set(by_name["avx512"].requires) | {"avx512_bf16"}
    for level in isa_levels.LEVELS[1:]:
        assert all(name in CPU_FEATURES for name in level.requires) or platform.machine() not in (
            "x86_64",
            "AMD64",
        ), level


# Linux's /proc/cpuinfo names for our feature names where they differ (an independent reading:
# the kernel's own CPUID decoding, with what it disabled removed).
_CPUINFO_NAME = {"sse3": "pni", "lzcnt": "abm", "sse4_1": "sse4_1", "bmi1": "bmi1"}


def test_feature_table_agrees_with_proc_cpuinfo():
    key, flags = cpuinfo_flags()
    machine = platform.machine()
    expected_key = {"x86_64": "flags", "aarch64": "Features"}.get(machine)
    if key is None or key != expected_key:
        # also the case under QEMU user emulation, which shows the host's /proc/cpuinfo
        pytest.skip(f"no /proc/cpuinfo feature line for {machine}")
    checked = 0
    for name, present in CPU_FEATURES.items():
        if name.startswith("os_") or name == "osxsave":
            continue  # not in /proc/cpuinfo; XGETBV state
        cpuinfo_name = _CPUINFO_NAME.get(name, name)
        if name == "amx_bf16" and present and cpuinfo_name not in flags:
            continue  # Linux before 5.16 does not list AMX, which pypto only reads as a mark
        assert present == (cpuinfo_name in flags), (name, present)
        checked += 1
    assert checked >= 8
    if machine == "x86_64":
        # the OS saves AVX(-512) state where it reports those features
        assert CPU_FEATURES["os_avx"] == ("avx" in flags)
        assert CPU_FEATURES["os_avx512"] == ("avx512f" in flags)
