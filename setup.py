"""Build pypto's Cython kernels.

One step beyond setuptools' defaults: an OpenMP probe. The kernels use OpenMP when the compiler
can build and run a tiny OpenMP program; otherwise they build serially and a warning says so
(set PYPTO_NO_OPENMP=1 to skip the probe). No -march=native: the package must run on any CPU
of its architecture.
"""

import os
import platform
import subprocess
import sys
import sysconfig
import tempfile
import textwrap

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

OPENMP_PROBE = textwrap.dedent("""
    #include <omp.h>
    #include <stdio.h>
    int main(void) {
        int n = 0;
        #pragma omp parallel reduction(+:n)
        n += 1;
        printf("%d", n > 0);
        return 0;
    }
""")


def say(message):
    print(f"[pypto] {message}", file=sys.stderr)


def openmp_flags():
    """(compile, link) flags for OpenMP, or ([], []) when the compiler cannot use it."""
    if os.environ.get("PYPTO_NO_OPENMP"):
        say("OpenMP disabled by PYPTO_NO_OPENMP: kernels run on one thread.")
        return [], []
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    flag = "-fopenmp"
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe")
        with open(src, "w") as f:
            f.write(OPENMP_PROBE)
        try:
            subprocess.run(cc.split() + [flag, src, "-o", exe], check=True, capture_output=True)
            ok = subprocess.run([exe], check=True, capture_output=True).stdout.strip() == b"1"
        except (OSError, subprocess.CalledProcessError):
            ok = False
    if not ok:
        say("WARNING: the compiler cannot build OpenMP programs: kernels run on one thread.")
        return [], []
    say(f"OpenMP found ({flag}).")
    return [flag], [flag]


def load_by_path(name, *path):
    """A module of the package loaded from its file: the package is not importable yet."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(*path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# One build of the kernel per ISA level, with the flags of pypto/_kernels/levels.py (the one
# table of levels); pypto._kernels.dispatch imports a level's module only on a CPU that has its
# features. The micro-kernel header selects its SIMD code from the macros these flags define.
ISA = load_by_path("pypto_isa_levels", "pypto", "_kernels", "levels.py")


def compiler_accepts(flags):
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as f:
            f.write("int main(void) { return 0; }\n")
        done = subprocess.run(
            cc.split() + flags + ["-c", src, "-o", os.path.join(tmp, "p.o")], capture_output=True
        )
    return done.returncode == 0


def isa_levels():
    levels = [
        level
        for level in ISA.levels_for(platform.machine())
        if not level.flags or compiler_accepts(list(level.flags))
    ]
    say(
        f"{platform.machine()}: kernel ISA levels built: "
        f"{', '.join(level.name for level in levels)}"
    )
    return levels


def extensions():
    from Cython.Build import cythonize

    omp_compile, omp_link = openmp_flags()
    # The feature check: baseline flags only, since it runs before anything else is known.
    features = Extension(
        "pypto._kernels.features",
        ["pypto/_kernels/features.pyx"],
        include_dirs=["pypto/_kernels"],
        extra_compile_args=["-O2"],
    )
    # The rules' cache key (pypto/_core/callkey.pyx): plain C, baseline flags too.
    call_key = Extension(
        "pypto._core.callkey", ["pypto/_core/callkey.pyx"], extra_compile_args=["-O2"]
    )
    # The judgement's element-wise pass (pypto/_golden/elementwise.pyx): plain C, baseline flags,
    # no contraction, so that its sums have the same bits on every CPU.
    judging = Extension(
        "pypto._golden.elementwise",
        ["pypto/_golden/elementwise.pyx"],
        extra_compile_args=["-O2", "-ffp-contract=off"],
    )
    kernels = [
        Extension(
            f"pypto._kernels.kernel.dgrad_{level.name}",
            [f"pypto/_kernels/kernel/dgrad_{level.name}.pyx"],
            include_dirs=["pypto/_kernels/kernel"],
            # fp-contract off: a*b+c in plain C stays two roundings at every level, so only the
            # micro-kernels' explicit FMAs differ between levels.
            extra_compile_args=["-O3", "-fno-math-errno", "-ffp-contract=off"]
            + list(level.flags)
            + omp_compile,
            extra_link_args=omp_link,
        )
        for level in isa_levels()
    ]
    return cythonize(
        [features, call_key, judging] + kernels,
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "initializedcheck": False,
            "cdivision": True,
        },
    )


class BuildPyWithNpuKernel(build_py):
    """Also build the AscendC kernel library into pypto/_npu/lib when a CANN toolkit is found
    (otherwise one line says why it was skipped, and the install goes on)."""

    def run(self):
        super().run()
        package = (
            "pypto"
            if getattr(self, "editable_mode", False)
            else os.path.join(self.build_lib, "pypto")
        )
        load_by_path(
            "pypto_ascendc_build", "pypto", "_npu", "kernel", "build.py"
        ).build_kernel_library(os.path.join(package, "_npu", "lib"))


setup(ext_modules=extensions(), cmdclass={"build_py": BuildPyWithNpuKernel})
