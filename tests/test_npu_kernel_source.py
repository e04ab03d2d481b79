"""The kernel source as CANN's build sees it, without CANN: what ascendc_library's generator of the
host launch wrapper finds in it, and whether the wrapper it would write compiles and matches our
ctypes prototype.

The generator (asc-devkit ``cmake/asc/legacy_modules/util/extract_host_stub.py``) runs on the
preprocessed kernel source. It finds struct definitions with the pattern below; a by-value
kernel parameter whose type is one of them becomes a host pointer in the wrapper, and the found
definitions (with those of their member types first) are copied into the wrapper's source. A
``typedef struct X { ... } X;`` is invisible to it, and the wrapper then does not compile.
"""

import ctypes
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pypto._npu.launch_struct import ConvDxLaunch
from pypto._npu.prototypes import LAUNCH_SYMBOL, PROTOTYPES

KERNEL_SOURCES = Path(importlib.util.find_spec("pypto._npu.kernel").submodule_search_locations[0])
HEADER = KERNEL_SOURCES / "pypto_conv_dx_tiling.h"
KERNEL = KERNEL_SOURCES / "pypto_conv_dx.cpp"
CC, CXX = shutil.which("gcc") or shutil.which("cc"), shutil.which("g++") or shutil.which("c++")
needs_cc = pytest.mark.skipif(CC is None, reason="no C preprocessor")
needs_cxx = pytest.mark.skipif(CXX is None, reason="no C++ compiler")

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
        found[match.group(1)] = preprocessed[match.start():pos + 1]
    return found


def member_types(definition):
    body = definition[definition.index("{") + 1:definition.rindex("}")]
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
    match = re.search(r'extern\s+"C"\s+__global__\s+__aicore__\s+void\s+pypto_conv_dx\s*\(([^)]*)\)',
                      source)
    assert match, "kernel entry point not found in pypto_conv_dx.cpp"
    params = []
    for param in match.group(1).split(","):
        *type_parts, name = param.split()
        params.append((" ".join(type_parts), name))
    return params


@pytest.fixture(scope="module")
def preprocessed_header():
    return subprocess.run([CC, "-E", "-P", "-x", "c++", str(HEADER)], capture_output=True,
                          text=True, check=True).stdout


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
    expected = ([ctypes.c_uint32, ctypes.c_void_p] + [ctypes.c_void_p] * (len(params) - 1)
                + [ctypes.POINTER(ConvDxLaunch)])
    assert restype is ctypes.c_uint32 and list(argtypes) == expected


@needs_cc
@needs_cxx
def test_a_wrapper_built_from_what_the_generator_finds_compiles(preprocessed_header, tmp_path):
    structs = find_structs(preprocessed_header)
    params = kernel_parameters()
    gm = [name for t, name in params if t == "GM_ADDR"]
    signature = ", ".join(["uint32_t numBlocks", "void* stream"] + [f"void* {n}" for n in gm]
                          + ["PyptoConvDxLaunch* launch"])
    stub = "\n".join([
        "#include <stdint.h>", "#include <string.h>",
        *definitions_in_order({"PyptoConvDxLaunch"}, structs),
        f'extern "C" uint32_t {LAUNCH_SYMBOL}({signature}) {{',
        "    struct { " + " ".join(f"void* {n};" for n in gm) + " PyptoConvDxLaunch launch; } args;",
        *(f"    args.{n} = {n};" for n in gm),
        "    memcpy(&args.launch, launch, sizeof(PyptoConvDxLaunch));",
        "    (void)numBlocks; (void)stream;",
        "    return sizeof(args.launch) == 328 ? 0u : 1u;",
        "}",
        'static_assert(sizeof(PyptoConvDxLaunch) == 328, "launch struct size");',
    ])
    (tmp_path / "host_stub.cpp").write_text(stub)
    done = subprocess.run([CXX, "-std=c++11", "-fsyntax-only", str(tmp_path / "host_stub.cpp")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr + "\n" + stub
