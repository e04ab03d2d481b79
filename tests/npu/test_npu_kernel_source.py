"""The kernel source and its build as CANN's tools see them, without CANN: what ascendc_library's
generator of the host launch wrapper finds in the source, and whether the wrapper it would write
compiles and matches our ctypes prototype; what the built library exports and needs; how the
build names the SoC from npu-smi; and the test double of the kernel's Fixpipe overflow modes.

The generator (asc-devkit ``cmake/asc/legacy_modules/util/extract_host_stub.py``) runs on the
preprocessed kernel source. It finds struct definitions with the pattern below; a by-value
kernel parameter whose type is one of them becomes a host pointer in the wrapper, and the found
definitions (with those of their member types first) are copied into the wrapper's source. A
``typedef struct X { ... } X;`` is invisible to it, and the wrapper then does not compile.
"""

import ctypes
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from pypto._npu import launch_struct as _launch_struct
from pypto._npu.launch_struct import ConvDxLaunch
from pypto._npu.prototypes import LAUNCH_SYMBOL, PROTOTYPES
from support.slowdown import limit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FAKE_SOURCES = HERE / "fake_ascend"
KERNEL_SOURCES = Path(importlib.util.find_spec("pypto._npu.kernel").submodule_search_locations[0])
HEADER = KERNEL_SOURCES / "pypto_conv_dx_tiling.h"
KERNEL = KERNEL_SOURCES / "pypto_conv_dx.cpp"
CMAKELISTS = KERNEL_SOURCES / "CMakeLists.txt"
CC, CXX = shutil.which("gcc") or shutil.which("cc"), shutil.which("g++") or shutil.which("c++")
NM, READELF, CMAKE = shutil.which("nm"), shutil.which("readelf"), shutil.which("cmake")
needs_cc = pytest.mark.skipif(CC is None, reason="no C preprocessor")
needs_cxx = pytest.mark.skipif(CXX is None, reason="no C++ compiler")
needs_nm = pytest.mark.skipif(NM is None, reason="no nm to list the exported symbols")
needs_cmake = pytest.mark.skipif(CMAKE is None, reason="no cmake")

# the generator's struct pattern (a fact about CANN's build, written here from its description)
STRUCT_START = re.compile(r"^\s*struct\s+(\w+)\s*\{", re.MULTILINE)


def find_structs(preprocessed):
    """{name: definition text} the way the generator cuts them: to the matching brace, plus one."""
    found = {}
    for match in STRUCT_START.finditer(preprocessed):
        depth, pos = 1, match.end()
        while depth and pos < len(preprocessed):
            depth += {"{": 1, "}": -1}.get(preprocessed[pos], 0)
            pos += 1
        found[match.group(1)] = preprocessed[match.start() : pos + 1]
    return found


def member_types(definition):
    body = definition[definition.index("{") + 1 : definition.rindex("}")]
    return [" ".join(member.split()[:-1]) for member in body.split(";") if member.strip()]


def definitions_in_order(names, structs):
    """Definitions of ``names`` with the structs their members use first (as the generator does)."""
    done, out = set(), []

    def visit(name):
        done.add(name)
        if name not in structs:
            return
        for member in member_types(structs[name]):
            if member not in done:
                visit(member)
        out.append(structs[name])

    for name in sorted(names):
        if name not in done:
            visit(name)
    return out


def kernel_parameters():
    """[(type, name)] of the extern "C" __global__ kernel in pypto_conv_dx.cpp."""
    source = KERNEL.read_text()
    match = re.search(
        r'extern\s+"C"\s+__global__\s+__aicore__\s+void\s+pypto_conv_dx\s*\(([^)]*)\)', source
    )
    assert match, "kernel entry point not found in pypto_conv_dx.cpp"
    params = []
    for param in match.group(1).split(","):
        *type_parts, name = param.split()
        params.append((" ".join(type_parts), name))
    return params


@pytest.fixture(scope="module")
def preprocessed_header():
    return subprocess.run(
        [CC, "-E", "-P", "-x", "c++", str(HEADER)], capture_output=True, text=True, check=True
    ).stdout


def test_the_finder_cannot_see_typedefd_struct_definitions():
    # the form the header used to have: if this finds it, the test below proves nothing
    assert find_structs("typedef struct A {\n int x;\n} A;\n") == {}
    assert set(find_structs("struct A {\n int x;\n};\ntypedef struct A A;\n")) == {"A"}


@needs_cc
def test_the_wrapper_generator_finds_both_launch_structs(preprocessed_header):
    structs = find_structs(preprocessed_header)
    assert {"PyptoConvDxApiTiling", "PyptoConvDxLaunch"} <= set(structs), sorted(structs)
    assert "PyptoConvDxApiTiling" in member_types(structs["PyptoConvDxLaunch"])


@needs_cc
def test_the_launch_struct_is_passed_by_pointer_as_the_prototype_says(preprocessed_header):
    structs = find_structs(preprocessed_header)
    params = kernel_parameters()
    by_value = [(t, n) for t, n in params if t in structs]
    assert by_value == [("PyptoConvDxLaunch", "launch")] and params[-1] == by_value[0]
    assert all(t == "GM_ADDR" for t, _ in params[:-1]), params
    # the wrapper: numBlocks, stream, one void* per GM_ADDR, then the struct as a host pointer
    _, restype, argtypes = PROTOTYPES[LAUNCH_SYMBOL]
    expected = (
        [ctypes.c_uint32, ctypes.c_void_p]
        + [ctypes.c_void_p] * (len(params) - 1)
        + [ctypes.POINTER(ConvDxLaunch)]
    )
    assert restype is ctypes.c_uint32 and list(argtypes) == expected


@needs_cc
@needs_cxx
def test_a_wrapper_built_from_what_the_generator_finds_compiles(preprocessed_header, tmp_path):
    structs = find_structs(preprocessed_header)
    params = kernel_parameters()
    gm = [name for t, name in params if t == "GM_ADDR"]
    signature = ", ".join(
        ["uint32_t numBlocks", "void* stream"]
        + [f"void* {n}" for n in gm]
        + ["PyptoConvDxLaunch* launch"]
    )
    stub = "\n".join(
        [
            "#include <stdint.h>",
            "#include <string.h>",
            *definitions_in_order({"PyptoConvDxLaunch"}, structs),
            f'extern "C" uint32_t {LAUNCH_SYMBOL}({signature}) {{',
            "    struct { "
            + " ".join(f"void* {n};" for n in gm)
            + " PyptoConvDxLaunch launch; } args;",
            *(f"    args.{n} = {n};" for n in gm),
            "    memcpy(&args.launch, launch, sizeof(PyptoConvDxLaunch));",
            "    (void)numBlocks; (void)stream;",
            "    return sizeof(args.launch) == 328 ? 0u : 1u;",
            "}",
            'static_assert(sizeof(PyptoConvDxLaunch) == 328, "launch struct size");',
        ]
    )
    (tmp_path / "host_stub.cpp").write_text(stub)
    done = subprocess.run(
        [CXX, "-std=c++11", "-fsyntax-only", str(tmp_path / "host_stub.cpp")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr + "\n" + stub


# --- the kernel source against stand-ins of the AscendC declarations it uses --------------------
# Not CANN's headers: the few declarations the kernel names, written from their public
# signatures, so that g++ can check the kernel's own C++ (syntax, names, types, the tiling copy,
# the overflow guard) without a toolkit. Whether CANN's API accepts it is first-run step 1.
ASCENDC_STANDIN = """\
#pragma once
#include <cstddef>
#include <cstdint>
#define __aicore__
#define __global__
#define __gm__
#define GM_ADDR __gm__ uint8_t*
#define KERNEL_TASK_TYPE_DEFAULT(type) ((void)(type))
enum KernelType { KERNEL_TYPE_AIC_ONLY };
enum pipe_t { PIPE_ALL };
struct half { uint16_t bits; };
struct bfloat16_t { uint16_t bits; };
#if defined(__NPU_ARCH__) && (__NPU_ARCH__ == 2201)
inline uint64_t get_ctrl() { return 0; }
#endif
namespace AscendC {
enum class TPosition { GM };
enum class CacheLine { SINGLE_CACHE_LINE };
enum class DcciDst { CACHELINE_OUT };
inline uint32_t GetBlockIdx() { return 0; }
template <pipe_t pipe> inline void PipeBarrier() {}
template <typename T> struct GlobalTensor {
    void SetGlobalBuffer(__gm__ T *buffer) { (void)buffer; }
    GlobalTensor operator[](uint64_t offset) const { (void)offset; return *this; }
    void SetValue(uint64_t offset, T value) { (void)offset; (void)value; }
};
template <typename T, CacheLine line, DcciDst dst>
inline void DataCacheCleanAndInvalid(const GlobalTensor<T> &tensor) { (void)tensor; }
struct AscendCUtils {
#if defined(__NPU_ARCH__) && (__NPU_ARCH__ == 2201)
    static void SetOverflow(uint64_t ctrlValue) { (void)ctrlValue; }
#endif
};
}  // namespace AscendC
"""
CONV_BP_STANDIN = """\
#pragma once
#include "pypto_conv_dx_tiling.h"
#define STANDIN_U32(name) uint32_t name;
#define STANDIN_I32(name) int32_t name;
#define STANDIN_U64(name) uint64_t name;
struct TConv3DBackpropInputTiling {  // CANN's struct, stood in by the same field list
    PYPTO_CONV_DX_API_U32_FIELDS(STANDIN_U32)
    PYPTO_CONV_DX_API_I32_FIELDS(STANDIN_I32)
    PYPTO_CONV_DX_API_U64_FIELDS(STANDIN_U64)
};
namespace ConvCommonApi { enum class ConvFormat { FRACTAL_Z_3D, ND, NDC1HWC0 }; }
namespace ConvBackpropApi {
enum class B2Condition { BASEK_LT_HKWK, BASEK_GE_HKWK, HKWK_EQ_ONE };
struct Conv3dConfig { B2Condition loadB2Condition; bool enableKernelSplit; };
template <AscendC::TPosition pos, ConvCommonApi::ConvFormat format, typename T> struct ConvType {};
template <class A, class B, class C, class D, const Conv3dConfig &config>
struct Conv3DBpInputCfg {};
struct Conv3DBpInputImpl {};
template <class Config, class Impl> struct Conv3DBpInputIntf {
    void Init(const TConv3DBackpropInputTiling *__restrict tiling) { (void)tiling; }
    void SetSingleShape(uint64_t m, uint64_t k, uint32_t n) { (void)m; (void)k; (void)n; }
    void SetStartPosition(uint32_t m, int32_t h) { (void)m; (void)h; }
    template <typename T> void SetGradOutput(const AscendC::GlobalTensor<T> &t) { (void)t; }
    template <typename T> void SetWeight(const AscendC::GlobalTensor<T> &t) { (void)t; }
    bool Iterate() { return false; }
    template <typename T> void GetTensorC(const AscendC::GlobalTensor<T> &t) { (void)t; }
    void End() {}
};
}  // namespace ConvBackpropApi
"""


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    root = tmp_path_factory.mktemp("ascendc_standins")
    (root / "lib" / "conv_backprop").mkdir(parents=True)
    (root / "kernel_operator.h").write_text(ASCENDC_STANDIN)
    (root / "lib" / "conv_backprop" / "conv3d_bp_input_api.h").write_text(CONV_BP_STANDIN)
    return root


def _syntax_check(standins, *defines):
    return subprocess.run(
        [
            CXX,
            "-std=c++17",
            "-fsyntax-only",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{standins}",
            f"-I{KERNEL_SOURCES}",
            *defines,
            "-x",
            "c++",
            str(KERNEL),
        ],
        capture_output=True,
        text=True,
    )


@needs_cxx
@pytest.mark.parametrize(
    "defines",
    [
        ["-D__NPU_ARCH__=2201", "-D__DAV_C220_CUBE__"],
        ["-D__NPU_ARCH__=2201", "-D__DAV_C220_VEC__"],
        [],
    ],
    ids=["cube-pass", "vec-pass", "host-pass"],
)
def test_the_kernel_is_well_formed_cpp_against_standins_of_ascendc(standins, defines):
    done = _syntax_check(standins, *defines)
    assert done.returncode == 0, done.stderr


@needs_cxx
def test_a_device_pass_without_the_arch_macro_stops_the_build(standins):
    done = _syntax_check(standins, "-D__DAV_C220_CUBE__")
    assert done.returncode != 0 and "Fixpipe overflow mode would not be set" in done.stderr


# --- F1, F8, F9 in the kernel source (it compiles only with CANN: checked as text) ---------------
def _code(path):
    """The source without its comments."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", "", path.read_text(), flags=re.DOTALL)


def test_the_kernel_sets_the_fixpipe_inf_nan_mode_and_restores_it():
    code = _code(KERNEL)
    entry = code[code.index('extern "C" __global__') :]
    guard = "#if defined(__NPU_ARCH__) && (__NPU_ARCH__ == 2201)"
    assert entry.count(guard) == 2, "set at entry and restored at exit, on 2201 builds"
    first, second = (entry.split(guard)[i].split("#")[0] for i in (1, 2))
    assert "AscendC::AscendCUtils::SetOverflow(1);" in first
    assert entry.index("SetOverflow(1)") < entry.index("RunTaskFor<")
    assert "SetOverflow(overflowBitBefore)" in second and entry.index("MarkDone(") < entry.rindex(
        guard
    )
    assert "#error" in entry  # a dav-c220 pass without the arch macro fails instead of skipping it


def test_the_kernel_reads_the_tiling_through_its_real_type_and_no_system_workspace():
    code = _code(KERNEL)
    assert "reinterpret_cast<const TConv3DBackpropInputTiling" not in code
    assert re.search(
        r"TConv3DBackpropInputTiling t;\s*__builtin_memcpy\(&t, &launch\.api, sizeof\(t\)\);", code
    )
    assert "dgrad.Init(&t);" in code
    # the done slots start at the workspace's first byte; no system workspace anywhere
    assert "SYSTEM_WORKSPACE" not in code and "MarkDone(workspace, launch)" in code
    assert "SYSTEM_WORKSPACE" not in HEADER.read_text()
    assert not hasattr(_launch_struct, "SYSTEM_WORKSPACE_BYTES")


# --- F3: the SoC from npu-smi ---------------------------------------------------------------------
def _load_build():
    spec = importlib.util.spec_from_file_location(
        "pypto_ascendc_build", KERNEL_SOURCES / "build.py"
    )
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)  # by path, as setup.py does
    return build


# What npu-smi prints (field layout of npu-smi 23.x-25.x; ids, versions and bus numbers are
# examples).
A2_CHIPS = """\
        NPU ID                         Chip ID                        Chip Logic ID                  Chip Name
        0                              0                              0                              Ascend 910B3
        0                              1                              -                              Mcu
        1                              0                              1                              Ascend 910B3
        1                              1                              -                              Mcu
"""  # noqa: E501 - npu-smi's own column layout
A2_BOARD_CHIP = """\
        NPU ID                         : 0
        Chip ID                        : 0
        Chip Type                      : Ascend
        Chip Name                      : 910B3
        Chip Version                   : V1
        Board ID                       : 0x65
        PCB ID                         : NA
        BOM ID                         : 1
        Chip Position ID               : 0
        PCIe Bus Info                  : 0000:C1:00.0
        Firmware Version               : 7.1.0.5.220
"""
A2_BOARD = """\
        NPU ID                         : 0
        Product Name                   : NA
        Model                          : NA
        Manufacturer                   : Huawei
        Software Version               : 23.0.6
        Firmware Version               : 7.1.0.5.220
        Compatibility                  : OK
        Board ID                       : 0x65
        PCB ID                         : A
        BOM ID                         : 1
        PCIe Bus Info                  : 0000:C1:00.0
        Slot ID                        : 0
        Class ID                       : NA
        PCI Vendor ID                  : 0x19E5
        PCI Device ID                  : 0xD802
        Chip Count                     : 1
"""
A2_TABLE = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.6                   Version: 23.0.6                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 93.6        35                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3380 / 65536         |
+===========================+===============+====================================================+
"""
A3_CHIPS = """\
        NPU ID                         Chip ID                        Chip Logic ID                  Chip Name
        0                              0                              0                              Ascend 910
        0                              1                              1                              Ascend 910
        0                              2                              -                              Mcu
"""  # noqa: E501 - npu-smi's own column layout
A3_BOARD_CHIP = """\
        NPU ID                         : 0
        NPU Name                       : 9392
        Chip ID                        : 0
        Chip Name                      : Ascend910
        Chip Version                   : V1
        Board ID                       : 0xb0
        PCB ID                         : NA
        BOM ID                         : 1
        Chip Position ID               : 0
        PCIe Bus Info                  : 0000:9D:00.0
        Firmware Version               : 7.8.0.6.201
"""
A3_BOARD = """\
        NPU ID                         : 0
        Product Name                   : NA
        NPU Name                       : 9382
        Chip Name                      : Ascend910
        Chip Version                   : V1
        Model                          : NA
        Manufacturer                   : Huawei
        Software Version               : 25.5.1
        Firmware Version               : 7.8.0.6.201
        Compatibility                  : OK
        Board ID                       : 0xb0
        PCIe Bus Info                  : 0000:9D:00.0
        Chip Count                     : 2
"""
A3_TABLE = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 25.5.1                   Version: 25.5.1                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU     Name              | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip    Phy-ID            | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0       Ascend910         | OK            | 168.2       36                0    / 0             |
| 0       0                 | 0000:9D:00.0  | 0           0    / 0          3402 / 65536         |
+---------------------------+---------------+----------------------------------------------------+
| 0       Ascend910         | OK            | -           36                0    / 0             |
| 1       1                 | 0000:9F:00.0  | 0           0    / 0          3159 / 65536         |
+===========================+===============+====================================================+
"""
GARBAGE = "npu-smi: command failed\nError: the device does not exist : 0x40\n: : :\n"


@pytest.mark.parametrize(
    "text, soc",
    [
        (A2_BOARD_CHIP, "Ascend910B3"),
        (A3_BOARD_CHIP, "Ascend910_9392"),
        (A3_BOARD, "Ascend910_9382"),
        (
            A3_BOARD_CHIP.replace(": 9392", ": Ascend910_9391"),
            "Ascend910_9391",
        ),  # the variant spelled out
        (A2_BOARD_CHIP.replace(": 910B3", ": 910B4-1"), "Ascend910B4-1"),
        (A2_BOARD, None),  # no Chip Name at board level there
        (A3_BOARD_CHIP.replace(": 9392", ": NA"), None),  # Ascend910 alone: which A3?
        (GARBAGE, None),
        ("", None),
    ],
)
def test_the_board_parser_names_a2_and_a3_socs(text, soc):
    assert _load_build().parse_npu_smi_board(text) == soc


def test_the_npu_smi_table_names_a2_but_cannot_name_a3():
    build = _load_build()
    assert build.parse_npu_smi_table(A2_TABLE) == "Ascend910B3"
    assert build.parse_npu_smi_table(A3_TABLE) is None
    assert build.parse_npu_smi_table(GARBAGE) is None


@pytest.fixture
def fake_npu_smi(tmp_path, monkeypatch):
    """``install({args: output})`` puts an npu-smi on PATH that prints those (and fails
    otherwise)."""

    def install(outputs):
        folder = tmp_path / "smi"
        folder.mkdir(exist_ok=True)
        (folder / "outputs.json").write_text(json.dumps(outputs))
        script = folder / "npu-smi"
        script.write_text(
            f"#!{sys.executable}\nimport json, sys\n"
            f"outputs = json.load(open({str(folder / 'outputs.json')!r}))\n"
            "key = ' '.join(sys.argv[1:])\n"
            "if key not in outputs:\n"
            "    sys.exit('Error: parameter error, usage: npu-smi info ...')\n"
            "sys.stdout.write(outputs[key])\n"
        )
        script.chmod(0o755)
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
        monkeypatch.delenv("SOC_VERSION", raising=False)

    return install


@pytest.mark.parametrize(
    "outputs, soc",
    [
        (
            {
                "info -m": A2_CHIPS,
                "info -t board -i 0 -c 0": A2_BOARD_CHIP,
                "info -t board -i 0": A2_BOARD,
                "info": A2_TABLE,
            },
            "Ascend910B3",
        ),
        (
            {
                "info -m": A3_CHIPS,
                "info -t board -i 0 -c 0": A3_BOARD_CHIP,
                "info -t board -i 0": A3_BOARD,
                "info": A3_TABLE,
            },
            "Ascend910_9392",
        ),
        # an npu-smi without the chip query: the board query names the A3 variant
        ({"info -m": A3_CHIPS, "info -t board -i 0": A3_BOARD, "info": A3_TABLE}, "Ascend910_9382"),
        # only the table: enough on A2, not on A3
        ({"info": A2_TABLE}, "Ascend910B3"),
        ({"info": A3_TABLE}, None),
        ({"info -m": GARBAGE, "info -t board -i 0 -c 0": GARBAGE, "info": GARBAGE}, None),
    ],
)
def test_the_soc_is_detected_from_npu_smi(fake_npu_smi, outputs, soc):
    fake_npu_smi(outputs)
    assert _load_build().detect_soc_version() == soc


def test_the_first_ai_chip_of_npu_smi_is_queried(fake_npu_smi):
    chips = A2_CHIPS.replace(
        "        0                              0                              0",
        "        4                              0                              0",
    )
    fake_npu_smi({"info -m": chips, "info -t board -i 4 -c 0": A2_BOARD_CHIP})
    assert _load_build().detect_soc_version() == "Ascend910B3"


def test_soc_version_overrides_npu_smi(fake_npu_smi, monkeypatch):
    fake_npu_smi({"info -t board -i 0 -c 0": A3_BOARD_CHIP})
    monkeypatch.setenv("SOC_VERSION", "Ascend910_9362")
    assert _load_build().detect_soc_version() == "Ascend910_9362"


def test_no_soc_from_npu_smi_skips_the_build_with_one_clear_line(
    fake_npu_smi, tmp_path, monkeypatch, capsys
):
    build = _load_build()
    module_dir = tmp_path / "cann" / "compiler" / "tikcpp" / "ascendc_kernel_cmake"
    module_dir.mkdir(parents=True)
    (module_dir / "ascendc.cmake").write_text("# a toolkit, as far as finding one goes\n")
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "cann"))
    fake_npu_smi({"info -m": A3_CHIPS, "info -t board -i 0 -c 0": GARBAGE, "info": A3_TABLE})
    ok, message = build.build_kernel_library(tmp_path / "out")
    assert not ok and "SOC_VERSION" in message and "Ascend910_9392" in message
    assert capsys.readouterr().err.splitlines() == [f"[pypto] NPU kernel skipped: {message}"]
    assert not (tmp_path / "out").exists()


# --- F5, F6: what the built library exports and needs ---------------------------------------------
def _exports():
    found = re.search(r"^set\(PYPTO_KERNEL_EXPORTS ([^)]*)\)", CMAKELISTS.read_text(), re.MULTILINE)
    assert found, "CMakeLists.txt names the library's exports in PYPTO_KERNEL_EXPORTS"
    return found.group(1).split()


def _dynamic_symbols(library):
    """The names `nm -D --defined-only` lists (what other objects in the process can bind to)."""
    out = subprocess.run(
        [NM, "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def _compile(args):
    done = subprocess.run([CC, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# as test_npu_fake_runtime.py
FLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared"]


@pytest.fixture(scope="module")
def fakes(tmp_path_factory):
    """The fake AscendCL runtime and two builds of the fake kernel: as test_npu_fake_runtime.py
    builds it, and with the link options the CMake project gives the real library."""
    if CC is None:
        pytest.skip("no C compiler to build the fake AscendCL runtime")
    root = tmp_path_factory.mktemp("fakes")
    acl = root / "toolkit" / "lib64" / "libascendcl.so"
    acl.parent.mkdir(parents=True)
    (root / "dev").mkdir()
    (root / "dev" / "davinci0").touch()
    _compile(FLAGS + ["-pthread", "-o", str(acl), str(FAKE_SOURCES / "fake_acl.c")])
    plain, limited = (
        root / "plain" / "libpypto_conv_dx.so",
        root / "limited" / "libpypto_conv_dx.so",
    )
    plain.parent.mkdir()
    limited.parent.mkdir()
    source = [f"-I{KERNEL_SOURCES}", str(FAKE_SOURCES / "fake_conv_dx_kernel.c"), "-lm"]
    _compile(FLAGS + ["-o", str(plain)] + source)
    script = root / "pypto_conv_dx.map"
    script.write_text(
        "{\n  global:\n    " + ";\n    ".join(_exports()) + ";\n  local:\n    *;\n};\n"
    )
    _compile(
        FLAGS
        + [
            "-o",
            str(limited),
            f"-Wl,--version-script={script}",
            "-Wl,--exclude-libs,ALL",
            "-Wl,-Bsymbolic",
        ]
        + source
    )

    def env(kernel=plain, **extra):
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("ASCEND_", "PYPTO_NPU_", "FAKE_")) and k != "PYPTO_DEVICE"
        }
        base.update(
            ASCEND_HOME_PATH=str(root / "toolkit"),
            PYPTO_NPU_KERNEL_LIB=str(kernel),
            PYPTO_NPU_DEV_DIR=str(root / "dev"),
            FAKE_ACL_REPORT=str(root / "report.json"),
            PYPTO_CACHE_DIR=str(root / "cache"),
        )  # self-check verdicts: not in ~/.cache
        base.update({k: str(v) for k, v in extra.items()})
        return base

    return SimpleNamespace(root=root, acl=acl, plain=plain, limited=limited, env=env)


def _run(code, env):
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=limit(300),
        cwd=str(ROOT / "tests"),
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.splitlines()[-1])


def test_the_library_exports_only_the_launch_wrapper():
    assert _exports() == [LAUNCH_SYMBOL]


@needs_nm
def test_the_fake_kernel_built_like_the_real_one_exports_only_the_launch_wrapper(fakes):
    assert _dynamic_symbols(fakes.limited) == {LAUNCH_SYMBOL}
    # the suite's own build keeps its envelope entry for the sweeps of test_npu_fake_runtime.py
    assert {LAUNCH_SYMBOL, "fake_conv_dx_envelope"} <= _dynamic_symbols(fakes.plain)


def test_the_kernel_library_loads_local_and_still_resolves_acl(fakes):
    """F5: libascendcl.so joins the global scope, the kernel library does not; the kernel library
    still resolves its own imports from libascendcl.so, and computes."""
    result = _run(
        f"""
        import ctypes, json
        import numpy as np
        from pypto._npu.acl import open_library
        acl = open_library({str(fakes.acl)!r}, "acl")
        kernel = open_library({str(fakes.limited)!r}, "kernel", message_source=acl)
        scope = ctypes.CDLL(None)  # what a library loaded later can bind to
        print(json.dumps(dict(acl_global=hasattr(scope, "aclInit"),
                              kernel_global=hasattr(scope, {LAUNCH_SYMBOL!r}),
                              bound=callable(getattr(kernel, {LAUNCH_SYMBOL!r})))))
    """,
        fakes.env(kernel=fakes.limited),
    )
    assert result == dict(acl_global=True, kernel_global=False, bound=True)
    result = _run(
        """
        import json
        import numpy as np
        import pypto, pypto.device as device
        from pypto import pypto_impl
        from pypto._kernels.dispatch import conv_backward_input_cpu
        from pypto._core.rules import validate_conv_backward_input
        pypto.set_convbp_input_tile_shapes(pypto_impl.ConvBpTileL1Info(16, 144, 16),
                                           pypto_impl.ConvBpTileL0Info(16, 16, 16))
        pypto.set_vec_tile_shapes(16, 16, 16, 16)
        call = validate_conv_backward_input(pypto.Tensor([1, 16, 5, 32], pypto.DT_FP16),
                                            [1, 16, 5, 32],
                                            pypto.Tensor([16, 16, 3, 3], pypto.DT_FP16),
                                            pypto.DT_FP16, [1, 1], [1, 1, 1, 1], [1, 1])
        rng = np.random.default_rng(0)
        dy = rng.integers(-4, 5, (1, 16, 5, 32)).astype(np.float16)
        w = rng.integers(-4, 5, (16, 16, 3, 3)).astype(np.float16)
        npu, cpu = device.conv_backward_input_npu(call, dy, w), conv_backward_input_cpu(call, dy, w)
        print(json.dumps(bool(np.array_equal(npu, cpu))))
    """,
        fakes.env(kernel=fakes.limited),
    )
    assert result is True


# A TEST DOUBLE of CANN's AscendC CMake module, of the parts that shape the library's symbols: the
# AscendC runtime archive (an imported static target named by ASCENDC_RUNTIME_STATIC_TARGET, linked
# PRIVATE by ascendc_library) and a host stub whose constructor registers an embedded "device
# binary" through it and whose launch wrapper launches through it, with the runtime's and the
# stub's symbol names. @RUNTIME@ and @STUB@ are filled in by the test.
RUNTIME_C = """\
void *g_registered;
unsigned RegisterAscendBinary(const char *buf, unsigned long size, unsigned type, void **handle)
{ (void)type; *handle = (void *)buf; g_registered = *handle; return size ? 0u : 1u; }
unsigned LaunchAscendKernel(void *handle, unsigned long key, unsigned blocks, void **args,
                            unsigned size, const void *stream)
{ (void)key; (void)blocks; (void)args; (void)size; (void)stream;
  return handle && handle == g_registered ? RUNTIME_ANSWER : 1u; }
"""
STUB_C = """\
struct ascend_kernels { unsigned long len; char buf[16]; };
struct ascend_kernels __replaced_ascend_kernel = {16, "device binary"};
static void *g_kernel_handle;
unsigned RegisterAscendBinary(const char *buf, unsigned long size, unsigned type, void **handle);
unsigned LaunchAscendKernel(void *handle, unsigned long key, unsigned blocks, void **args,
                            unsigned size, const void *stream);
static void register_kernels(void) __attribute__((constructor));
static void register_kernels(void)
{ RegisterAscendBinary(__replaced_ascend_kernel.buf, __replaced_ascend_kernel.len, 0,
                       &g_kernel_handle); }
unsigned aclrtlaunch_pypto_conv_dx(void)
{ return LaunchAscendKernel(g_kernel_handle, 1, 1, 0, 0, 0); }
"""
FAKE_CANN_CMAKE = """\
set(ASCENDC_RUNTIME_STATIC_TARGET ascendc_runtime_static)
add_library(ascendc_runtime_static STATIC IMPORTED)
set_target_properties(ascendc_runtime_static PROPERTIES IMPORTED_LOCATION "@RUNTIME@")
function(ascendc_library target kind)
  add_library(${target} ${kind} "@STUB@")
  target_link_libraries(${target} PRIVATE
    $<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,SHARED_LIBRARY>:ascendc_runtime_static>)
  set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
endfunction()
function(ascendc_include_directories target scope)
  target_include_directories(${target} ${scope} ${ARGN})
endfunction()
function(ascendc_compile_definitions target scope)
  target_compile_definitions(${target} ${scope} ${ARGN})
endfunction()
"""


@needs_cc
@needs_nm
@needs_cmake
@pytest.mark.parametrize(
    "runtime_target", [True, False], ids=["cann-module", "module-without-runtime-target"]
)
def test_the_cmake_project_keeps_the_ascendc_runtime_private(
    runtime_target, tmp_path, monkeypatch, capsys
):
    """F5 and F6 on the CMake project itself, with a CANN-shaped ascendc_library: the library
    exports the launch wrapper only, binds the runtime and the stub's globals inside itself (a
    library with the same names loaded first does not capture them, nor does it capture that
    library's), and names its runtime libraries in NEEDED by name even without DT_SONAME."""
    cann = tmp_path / "cann"
    module_dir = cann / "compiler" / "tikcpp" / "ascendc_kernel_cmake"
    module_dir.mkdir(parents=True)
    lib64 = cann / "lib64"
    lib64.mkdir()
    (tmp_path / "empty.c").write_text("int pypto_fake_runtime_symbol;\n")
    for name in ("ascendcl", "runtime"):  # no -soname: NEEDED must still be the bare name
        _compile(
            ["-shared", "-fPIC", "-o", str(lib64 / f"lib{name}.so"), str(tmp_path / "empty.c")]
        )
    (tmp_path / "runtime.c").write_text(RUNTIME_C)
    _compile(
        [
            "-c",
            "-fPIC",
            "-DRUNTIME_ANSWER=7u",
            "-o",
            str(tmp_path / "runtime.o"),
            str(tmp_path / "runtime.c"),
        ]
    )
    subprocess.run(
        ["ar", "rcs", str(lib64 / "libascendc_runtime.a"), str(tmp_path / "runtime.o")], check=True
    )
    (tmp_path / "stub.c").write_text(STUB_C)
    module = FAKE_CANN_CMAKE.replace("@RUNTIME@", str(lib64 / "libascendc_runtime.a"))
    if not runtime_target:
        module = module.replace("set(ASCENDC_RUNTIME_STATIC_TARGET ascendc_runtime_static)\n", "")
    (module_dir / "ascendc.cmake").write_text(module.replace("@STUB@", str(tmp_path / "stub.c")))
    monkeypatch.setenv("ASCEND_HOME_PATH", str(cann))
    monkeypatch.delenv("SOC_VERSION", raising=False)

    ok, message = _load_build().build_kernel_library(tmp_path / "out", "Ascend910B3")
    assert ok, message
    library = tmp_path / "out" / "libpypto_conv_dx.so"
    exported = _dynamic_symbols(library)
    assert LAUNCH_SYMBOL in exported
    assert not exported & {"RegisterAscendBinary", "LaunchAscendKernel", "g_registered"}, exported
    if runtime_target:  # CANN's module: the version script applies
        assert exported == {LAUNCH_SYMBOL}
    if READELF:
        dynamic = subprocess.run(
            [READELF, "-d", str(library)], capture_output=True, text=True, check=True
        ).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
        assert "libascendcl.so" in needed and "libruntime.so" in needed, needed
        assert not [n for n in needed if "/" in n], needed

    # another ascendc_library-built library, with the same runtime and stub names, loaded first
    # and globally: it must neither capture our library's references nor be captured by ours
    (tmp_path / "other_runtime.c").write_text(RUNTIME_C.replace("RUNTIME_ANSWER", "99u"))
    other = tmp_path / "libother_kernels.so"
    _compile(
        [
            "-shared",
            "-fPIC",
            "-o",
            str(other),
            str(tmp_path / "other_runtime.c"),
            str(tmp_path / "stub.c"),
        ]
    )
    result = _run(
        f"""
        import ctypes, json
        other = ctypes.CDLL({str(other)!r}, mode=ctypes.RTLD_GLOBAL)
        ours = ctypes.CDLL({str(library)!r}, mode=ctypes.RTLD_LOCAL)
        print(json.dumps([ours.{LAUNCH_SYMBOL}(), other.{LAUNCH_SYMBOL}()]))
    """,
        dict(os.environ),
    )
    assert result == [7, 99]


# --- F1: the fake kernel's two Fixpipe modes, and a kernel wrong on one problem -------------------
FIXPIPE_SCRIPT = """
    import json
    import numpy as np
    import pypto, pypto.device as device
    from pypto import pypto_impl
    from pypto._kernels.dispatch import conv_backward_input_cpu
    from pypto._dtypes import numpy_dtype
    from pypto._core.rules import validate_conv_backward_input

    def run(dtype, k, dy, w):
        pypto.set_convbp_input_tile_shapes(pypto_impl.ConvBpTileL1Info(16, 16 * k * k, 16),
                                           pypto_impl.ConvBpTileL0Info(16, 16, 16))
        pypto.set_vec_tile_shapes(16, 16, 16, 16)
        p = (k - 1) // 2
        call = validate_conv_backward_input(pypto.Tensor([1, 16, 5, 32], dtype), [1, 16, 5, 32],
                                            pypto.Tensor([16, 16, k, k], dtype), dtype, [1, 1],
                                            [p, p, p, p], [1, 1])
        t = numpy_dtype(dtype)
        dy, w = dy.astype(t), w.astype(t)
        return (device.conv_backward_input_npu(call, dy, w).astype(np.float64),
                conv_backward_input_cpu(call, dy, w).astype(np.float64))

    def same(a, b):  # equal, NaN where NaN
        return bool(np.array_equal(a, b, equal_nan=True))

    out = {}
    # fp16: every sum past 65504 (+ for input channels 0-7, - for 8-15), one NaN in dy
    dy = np.full((1, 16, 5, 32), 200.0)
    dy[0, 0, 2, 5] = np.nan
    w = np.full((16, 16, 3, 3), 200.0)
    w[:, 8:] = -200.0
    npu, cpu = run(pypto.DT_FP16, 3, dy, w)
    nan, inf = np.isnan(cpu), np.isinf(cpu)
    out["fp16"] = dict(same=same(npu, cpu), nan=int(nan.sum()), inf=int(inf.sum()),
                       saturated=bool(np.array_equal(npu[inf], np.sign(cpu[inf]) * 65504.0)),
                       nan_zero=bool(np.all(npu[nan] == 0.0)), finite=bool(np.isfinite(npu).all()))
    # bf16: Inf, -Inf and NaN in dy, finite sums elsewhere
    rng = np.random.default_rng(0)
    dy, w = rng.uniform(-1, 1, (1, 16, 5, 32)), rng.uniform(-1, 1, (16, 16, 3, 3))
    dy[0, 1, 1, 1], dy[0, 2, 3, 20], dy[0, 3, 4, 30] = np.inf, -np.inf, np.nan
    npu, cpu = run(pypto.DT_BF16, 3, dy, w)
    nan, inf = np.isnan(cpu), np.isinf(cpu)
    bf16_max = float.fromhex("0x1.fep127")
    out["bf16"] = dict(same=same(npu, cpu), nan=int(nan.sum()), inf=int(inf.sum()),
                       saturated=bool(np.array_equal(npu[inf], np.sign(cpu[inf]) * bf16_max)),
                       nan_zero=bool(np.all(npu[nan] == 0.0)),
                       rest=bool(np.array_equal(npu[~nan & ~inf], cpu[~nan & ~inf])))
    # small integers: every sum exact, so any wrong output shows
    dy = rng.integers(-4, 5, (1, 16, 5, 32)).astype(np.float64)
    for k in (1, 3):
        w = rng.integers(-4, 5, (16, 16, k, k)).astype(np.float64)
        npu, cpu = run(pypto.DT_FP16, k, dy, w)
        out[f"k{k}"] = "equal" if same(npu, cpu) else "plus one" if same(npu, cpu + 1) else "other"
    print(json.dumps(out))
"""


def _ml_dtypes():
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        pytest.skip("ml_dtypes (bf16 host arrays) is not installed")


def test_the_fake_kernel_keeps_inf_and_nan_by_default(fakes):
    _ml_dtypes()
    out = _run(FIXPIPE_SCRIPT, fakes.env(PYPTO_DEVICE="npu"))
    assert out["fp16"]["same"] and out["fp16"]["nan"] and out["fp16"]["inf"], out
    assert out["bf16"]["same"] and out["bf16"]["nan"] and out["bf16"]["inf"], out
    assert out["k1"] == out["k3"] == "equal", out


def test_the_fake_kernel_models_the_saturating_fixpipe(fakes):
    _ml_dtypes()
    out = _run(FIXPIPE_SCRIPT, fakes.env(PYPTO_DEVICE="npu", FAKE_KERNEL_SATURATE=1))
    fp16, bf16 = out["fp16"], out["bf16"]
    assert not fp16["same"] and fp16["saturated"] and fp16["nan_zero"] and fp16["finite"], out
    assert not bf16["same"] and bf16["saturated"] and bf16["nan_zero"] and bf16["rest"], out
    assert out["k1"] == out["k3"] == "equal", out  # finite, in-range sums: both modes agree


@pytest.mark.parametrize("kh, wrong", [(3, "k3"), (1, "k1"), (5, None)])
def test_the_fake_kernel_can_be_wrong_on_one_kernel_height(fakes, kh, wrong):
    _ml_dtypes()
    out = _run(FIXPIPE_SCRIPT, fakes.env(PYPTO_DEVICE="npu", FAKE_KERNEL_WRONG_KH=kh))
    for name in ("k1", "k3"):
        assert out[name] == ("plus one" if name == wrong else "equal"), out


def test_npu_check_reports_a_saturating_fixpipe(fakes):
    """examples/npu_check.py's non-finite cases catch a kernel whose Inf/NaN mode did not take."""
    example = ROOT / "examples" / "npu_check.py"
    done = subprocess.run(
        [sys.executable, str(example)],
        env=fakes.env(FAKE_KERNEL_SATURATE=1),
        capture_output=True,
        text=True,
        timeout=limit(300),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.count("NPU and CPU agree") == 5, done.stdout  # the finite problems
    assert done.stdout.count("NPU DIFFERS from the CPU in its NaN/Inf positions") == 2, done.stdout
    assert "saturating mode" in done.stdout
    # the weight's Inf/NaN are handled on the host (pypto/_core/nonfinite.py): both modes agree
    # there
    assert done.stdout.count("NPU matches the CPU") == 1, done.stdout
