"""Build pypto's AscendC dgrad kernel library (libpypto_conv_dx.so) with a CANN toolkit.

``build_kernel_library(out_dir)`` is what setup.py calls; it never raises for a missing or
failing toolkit: it prints one line and returns ``(ok, message)``, so a host without CANN
installs the CPU package as before. Standard library only, and no ``pypto`` import: setup.py
loads this file by path before the package is built.

Rebuild by hand (on an Atlas host, after ``source .../set_env.sh``)::

    python -m pypto._npu.kernel.build                 # into the installed pypto/_npu/lib
    python pypto/_npu/kernel/build.py --soc Ascend910B3 --out /some/dir
"""

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

KERNEL_NAME = "pypto_conv_dx"
LIBRARY_NAME = f"lib{KERNEL_NAME}.so"
LAUNCH_SYMBOL = f"aclrtlaunch_{KERNEL_NAME}"
SOURCE_DIR = Path(__file__).resolve().parent
DEFAULT_OUT_DIR = SOURCE_DIR.parent / "lib"  # where pypto.device looks
# Where CANN keeps the AscendC CMake module (ascendc.cmake), by toolkit generation: older
# toolkits' compiler/ and tools/ links, newer asc-devkit's <arch>-linux install folder.
CMAKE_MODULE_DIRS = ("compiler/tikcpp/ascendc_kernel_cmake", "tools/tikcpp/ascendc_kernel_cmake",
                     f"{platform.machine()}-linux/tikcpp/ascendc_kernel_cmake")
STANDARD_TOOLKIT_ROOTS = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann",
                          "~/Ascend/ascend-toolkit/latest")
A2_A3_SOC = re.compile(r"^ascend910(b[1-4]|_93\d\d)", re.IGNORECASE)


def _say(message):
    print(f"[pypto] {message}", file=sys.stderr)


def cmake_module_dir(root):
    """The folder of ``ascendc.cmake`` under a toolkit root, or None."""
    for sub in CMAKE_MODULE_DIRS:
        if (Path(root) / sub / "ascendc.cmake").is_file():
            return Path(root) / sub
    return None


def find_toolkit():
    """(root, None) of the first CANN toolkit with the AscendC CMake module, else (None, reason)."""
    candidates = [("ASCEND_HOME_PATH", os.environ.get("ASCEND_HOME_PATH")),
                  ("ASCEND_TOOLKIT_HOME", os.environ.get("ASCEND_TOOLKIT_HOME"))]
    candidates += [("standard path", root) for root in STANDARD_TOOLKIT_ROOTS]
    looked = []
    for source, root in candidates:
        if not root:
            continue
        root = Path(root).expanduser()
        if cmake_module_dir(root):
            return root, None
        looked.append(f"{root} ({source})")
    where = ", ".join(looked) if looked else "ASCEND_HOME_PATH and ASCEND_TOOLKIT_HOME are unset"
    return None, ("no CANN toolkit with the AscendC CMake module found (looked in: "
                  f"{where}); source set_env.sh of CANN to build the NPU kernel")


def detect_soc_version():
    """SOC_VERSION from the environment, else from ``npu-smi info`` (e.g. 910B3 -> Ascend910B3)."""
    soc = os.environ.get("SOC_VERSION", "").strip()
    if soc:
        return soc
    smi = shutil.which("npu-smi")
    if not smi:
        return None
    try:
        text = subprocess.run([smi, "info"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"\b(910B[1-4]|910_93\d\d)\b", text)
    return f"Ascend{found.group(1)}" if found else None


def _exports_launch_symbol(library):
    """True when the library exports the unmangled launch wrapper (None when nm is missing)."""
    nm = shutil.which("nm")
    if not nm:
        return None
    out = subprocess.run([nm, "-D", "--defined-only", str(library)], capture_output=True, text=True)
    return re.search(rf"\b{LAUNCH_SYMBOL}\b", out.stdout) is not None


def build_kernel_library(out_dir=DEFAULT_OUT_DIR, soc_version=None, jobs=None):
    """Build libpypto_conv_dx.so into ``out_dir``; returns ``(ok, message)`` and prints one line.

    Needs a CANN toolkit (found through ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME or the standard
    install paths), cmake, and the SoC (``soc_version``, else SOC_VERSION, else ``npu-smi``).
    """
    def done(ok, message):
        _say(("NPU kernel built: " if ok else "NPU kernel skipped: ") + message)
        return ok, message

    root, reason = find_toolkit()
    if root is None:
        return done(False, reason)
    soc = soc_version or detect_soc_version()
    if not soc:
        return done(False, "no SoC given and npu-smi did not name one: set SOC_VERSION "
                           "(e.g. Ascend910B3 for A2, Ascend910_9392 for A3)")
    if not A2_A3_SOC.match(soc):
        return done(False, f"SOC_VERSION={soc} is not an Atlas A2/A3 SoC (Ascend910B*, "
                           "Ascend910_93*)")
    cmake = shutil.which("cmake")
    if not cmake:
        return done(False, "cmake not found on PATH")

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    build_dir = Path(tempfile.mkdtemp(prefix="pypto_ascendc_"))  # kept, with its log, on failure
    log_path = build_dir / "build.log"
    with open(log_path, "w") as log:
        steps = [
            [cmake, "-S", str(SOURCE_DIR), "-B", str(build_dir), f"-DSOC_VERSION={soc}",
             f"-DASCEND_CANN_PACKAGE_PATH={root}", f"-DASCENDC_CMAKE_DIR={cmake_module_dir(root)}",
             "-DCMAKE_BUILD_TYPE=Release"],
            [cmake, "--build", str(build_dir), "-j", str(jobs or os.cpu_count() or 1)],
        ]
        for step in steps:
            log.write("$ " + " ".join(step) + "\n")
            log.flush()
            if subprocess.run(step, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
                return done(False, f"CANN build failed (SOC_VERSION={soc}); log: {log_path}")
    built = sorted(build_dir.rglob(LIBRARY_NAME))
    if not built:
        return done(False, f"the build produced no {LIBRARY_NAME}; log: {log_path}")
    if _exports_launch_symbol(built[0]) is False:
        return done(False, f"{LIBRARY_NAME} does not export {LAUNCH_SYMBOL} (mangled or "
                           f"renamed by this CANN); log: {log_path}")
    target = out_dir / LIBRARY_NAME
    shutil.copy2(built[0], target)
    shutil.rmtree(build_dir, ignore_errors=True)
    return done(True, f"{target} (SOC_VERSION={soc}, CANN {root})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT_DIR), help="output directory")
    parser.add_argument("--soc", default=None, help="SOC_VERSION, e.g. Ascend910B3")
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args(argv)
    ok, _ = build_kernel_library(args.out, args.soc, args.jobs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
