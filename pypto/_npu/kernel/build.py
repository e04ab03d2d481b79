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
CMAKE_MODULE_DIRS = (
    "compiler/tikcpp/ascendc_kernel_cmake",
    "tools/tikcpp/ascendc_kernel_cmake",
    f"{platform.machine()}-linux/tikcpp/ascendc_kernel_cmake",
)
STANDARD_TOOLKIT_ROOTS = (
    "/usr/local/Ascend/ascend-toolkit/latest",
    "/usr/local/Ascend/cann",
    "~/Ascend/ascend-toolkit/latest",
)
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
    candidates = [
        ("ASCEND_HOME_PATH", os.environ.get("ASCEND_HOME_PATH")),
        ("ASCEND_TOOLKIT_HOME", os.environ.get("ASCEND_TOOLKIT_HOME")),
    ]
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
    return None, (
        "no CANN toolkit with the AscendC CMake module found (looked in: "
        f"{where}); source set_env.sh of CANN to build the NPU kernel"
    )


# `npu-smi info -t board ...` prints "Field Name   : value" lines.
_BOARD_FIELD = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?)\s*:\s*(.*?)\s*$")
_NO_VALUE = {"", "NA", "N/A", "-", "XXX", "UNKNOWN"}
# `npu-smi info -m`: NPU ID, Chip ID, Chip Logic ID ("-" for the MCU), Chip Name.
_CHIP_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+\S", re.MULTILINE)
SOC_HELP = "set SOC_VERSION (e.g. Ascend910B3 for A2, Ascend910_9392 for A3)"


def parse_npu_smi_board(text):
    """The SoC named by ``npu-smi info -t board -i <id> [-c <chip>]``, or None.

    A2 prints ``Chip Name : 910B3`` (with ``Chip Type : Ascend``): SoC ``Ascend910B3``. A3 prints
    ``Chip Name : Ascend910`` and the variant in ``NPU Name``, either as ``9392`` or already as
    ``Ascend910_9392``: SoC ``Ascend910_9392``. A bare ``Ascend910`` without an NPU Name names
    no buildable SoC (the kernel needs the A3 variant), so it gives None, as unreadable text does.
    """
    fields = {}
    for line in (text or "").splitlines():
        match = _BOARD_FIELD.match(line)
        if match:
            fields.setdefault(match.group(1).lower(), match.group(2))

    def value(name):
        found = fields.get(name, "").replace(" ", "")
        return None if found.upper() in _NO_VALUE else found

    chip, npu = value("chip name"), value("npu name")
    if npu:
        variant = re.fullmatch(r"(?:(?:Ascend)?910_?)?(9\d{3})", npu, re.IGNORECASE)
        if variant and (chip is None or re.fullmatch(r"(?:Ascend)?910", chip, re.IGNORECASE)):
            return f"Ascend910_{variant.group(1)}"
    if chip and not re.fullmatch(r"(?:Ascend)?910", chip, re.IGNORECASE):
        name = re.fullmatch(r"(?:Ascend)?([0-9A-Za-z][0-9A-Za-z_-]*)", chip)
        if name:
            return "Ascend" + name.group(1).upper()
    return None


def parse_npu_smi_table(text):
    """The SoC in the ``npu-smi info`` table, or None. On A2 its name column reads ``910B3``; on
    A3 it reads ``Ascend910`` without the variant, which this cannot complete."""
    found = re.search(r"\b(910B[1-4]|910_93\d\d)\b", text or "")
    return f"Ascend{found.group(1)}" if found else None


def _npu_smi(smi, *args):
    try:
        return subprocess.run([smi, *args], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def detect_soc_version():
    """SOC_VERSION from the environment, else from ``npu-smi``, else None.

    The first AI chip of ``npu-smi info -m`` (NPU 0, chip 0 when that lists none) is read with
    ``npu-smi info -t board -i <npu> -c <chip>``, then ``-t board -i <npu>`` (Chip Name and NPU
    Name: the only place that names the A3 variant), then the ``npu-smi info`` table (A2 only).
    """
    soc = os.environ.get("SOC_VERSION", "").strip()
    if soc:
        return soc
    smi = shutil.which("npu-smi")
    if not smi:
        return None
    first = _CHIP_ROW.search(_npu_smi(smi, "info", "-m"))
    npu_id, chip_id = first.group(1, 2) if first else ("0", "0")
    for args in (("-t", "board", "-i", npu_id, "-c", chip_id), ("-t", "board", "-i", npu_id)):
        soc = parse_npu_smi_board(_npu_smi(smi, "info", *args))
        if soc:
            return soc
    return parse_npu_smi_table(_npu_smi(smi, "info"))


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
        where = (
            "npu-smi (info -t board, info) named no Atlas A2/A3 SoC"
            if shutil.which("npu-smi")
            else "npu-smi is not on PATH"
        )
        return done(False, f"no SoC given, and {where}: {SOC_HELP}")
    if not A2_A3_SOC.match(soc):
        return done(
            False, f"SOC_VERSION={soc} is not an Atlas A2/A3 SoC (Ascend910B*, Ascend910_93*)"
        )
    cmake = shutil.which("cmake")
    if not cmake:
        return done(False, "cmake not found on PATH")

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    build_dir = Path(tempfile.mkdtemp(prefix="pypto_ascendc_"))  # kept, with its log, on failure
    log_path = build_dir / "build.log"
    with open(log_path, "w") as log:
        steps = [
            [
                cmake,
                "-S",
                str(SOURCE_DIR),
                "-B",
                str(build_dir),
                f"-DSOC_VERSION={soc}",
                f"-DASCEND_CANN_PACKAGE_PATH={root}",
                f"-DASCENDC_CMAKE_DIR={cmake_module_dir(root)}",
                "-DCMAKE_BUILD_TYPE=Release",
            ],
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
        return done(
            False,
            f"{LIBRARY_NAME} does not export {LAUNCH_SYMBOL} (mangled or "
            f"renamed by this CANN); log: {log_path}",
        )
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
