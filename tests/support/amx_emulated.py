"""The avx512_amx kernel level built with its tile-unit instructions in software
(``-DPYPTO_AMX_EMULATED``: pypto_amx_emulated.h codes TILELOADD, TILESTORED, TILEZERO and
TDPBF16PS as the Intel SDM defines them), from the kernel sources of the pypto under test: the
tile unit's path (configuration, operand layouts, loads, stores, instruction order) then runs
on any AVX-512 CPU. Flags: the level's own (pypto/_kernels/levels.py) less its AMX ones."""

import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig

import numpy as np

import pypto._kernels.kernel as kernel_package
from pypto._kernels.dispatch import CPU_LEVELS
from pypto._kernels.levels import BY_NAME

MODULE = "pypto._kernels.kernel.dgrad_avx512_amx"
DIRECTIVES = "boundscheck=False,wraparound=False,initializedcheck=False,cdivision=True"


def compiler():
    """The C compiler's command (CC, else Python's)"""
    return (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()


def why_not():
    """Why this host cannot build or run the software unit's module, or None."""
    if "avx512" not in CPU_LEVELS:
        return "the CPU (or the OS) has no AVX-512, which the avx512_amx level's code needs"
    if importlib.util.find_spec("Cython") is None:
        return "Cython is not installed (pip install 'Cython>=3,<4')"
    if shutil.which(compiler()[0]) is None:
        return f"no C compiler ({compiler()[0]})"
    return None


def build(folder, extra_flags=()):
    """The module, compiled into ``folder`` from the package's dgrad_avx512_amx.pyx (with
    ``extra_flags``: tools/asan_check.sh's AddressSanitizer) and loaded under its own name
    (beside the package's build of the level, if any)."""
    sources = os.path.dirname(kernel_package.__file__)
    c_file = os.path.join(folder, "dgrad_avx512_amx.c")
    so_file = os.path.join(folder, "dgrad_avx512_amx" + sysconfig.get_config_var("EXT_SUFFIX"))
    _run([sys.executable, "-m", "cython", "-3", "--directive", DIRECTIVES, "-o", c_file,
          os.path.join(sources, "dgrad_avx512_amx.pyx")])  # fmt: skip
    flags = [f for f in BY_NAME["avx512_amx"].flags if not f.startswith("-mamx")]
    command = compiler() + [
        "-shared", "-fPIC", "-O2", "-fno-math-errno", "-ffp-contract=off", *flags,
        "-DPYPTO_AMX_EMULATED", "-I", sources, "-I", sysconfig.get_paths()["include"],
        "-I", np.get_include(), *extra_flags, c_file, "-o", so_file,
    ]  # fmt: skip
    # with OpenMP where the compiler has it (the unit's path on a team), else without
    if subprocess.run(command + ["-fopenmp"], capture_output=True).returncode != 0:
        _run(command)
    loader = importlib.machinery.ExtensionFileLoader(MODULE, so_file)
    spec = importlib.util.spec_from_file_location(MODULE, so_file, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _run(command):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} ... failed:\n{done.stderr[-3000:]}")
