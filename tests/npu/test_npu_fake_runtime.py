"""The NPU path (pypto.device) on a machine without an NPU.

``tests/npu/fake_ascend`` holds a TEST DOUBLE of AscendCL (``fake_acl.c``, built here into
``<tmp>/toolkit/lib64/libascendcl.so``) and of our kernel library (``fake_conv_dx_kernel.c``,
exporting the exact ``aclrtlaunch_pypto_conv_dx``): device memory is host memory with
bookkeeping, and the fake kernel checks the launch against the AscendC API's limits, then
computes dgrad plainly from the NC1HWC0 / FRACTAL_Z buffers and the launch struct it received.
pypto finds the fakes through ``ASCEND_HOME_PATH``, ``PYPTO_NPU_KERNEL_LIB`` and
``PYPTO_NPU_DEV_DIR`` (a directory with a ``davinci0`` file). Every scenario runs in a fresh
interpreter, so the loaded libraries, the runtime and its atexit teardown never leak.
"""

import ctypes
import importlib.util
import inspect
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import pypto
from pypto._npu import launch_struct as layout
from pypto._npu.plan import MAX_BACKPROP_PAD, axis_window
from support.slowdown import limit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FAKE_SOURCES = HERE / "fake_ascend"
# the installed package's copy (the wheel ships the kernel sources): CI runs the tests against
# an installed pypto, on AArch64 without the source tree beside them
KERNEL_SOURCES = Path(importlib.util.find_spec("pypto._npu.kernel").submodule_search_locations[0])
CC = shutil.which("gcc") or shutil.which("cc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler to build the fake AscendCL runtime")


def _compile(args):
    done = subprocess.run([CC, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="session")
def fake_ascend(tmp_path_factory):
    """The fake toolkit, kernel library and device node; ``env(**extra)`` for a subprocess."""
    if CC is None:
        pytest.skip("no C compiler to build the fake AscendCL runtime")
    root = tmp_path_factory.mktemp("fake_ascend")
    acl = root / "toolkit" / "lib64" / "libascendcl.so"
    kernel = root / "kernel" / "libpypto_conv_dx.so"
    acl.parent.mkdir(parents=True)
    kernel.parent.mkdir()
    (root / "dev").mkdir()
    (root / "dev" / "davinci0").touch()
    flags = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared"]
    _compile(flags + ["-pthread", "-o", str(acl), str(FAKE_SOURCES / "fake_acl.c")])
    # Not linked to the fake libascendcl: its symbols must come from the global scope.
    _compile(
        flags
        + [
            f"-I{KERNEL_SOURCES}",
            "-o",
            str(kernel),
            str(FAKE_SOURCES / "fake_conv_dx_kernel.c"),
            "-lm",
        ]
    )

    def env(**extra):
        base = clean_env()
        base.update(
            ASCEND_HOME_PATH=str(root / "toolkit"),
            PYPTO_NPU_KERNEL_LIB=str(kernel),
            PYPTO_NPU_DEV_DIR=str(root / "dev"),
            FAKE_ACL_REPORT=str(root / "report.json"),
            PYPTO_CACHE_DIR=str(root / "cache"),
        )  # self-check verdicts: not in ~/.cache
        base.update({k: str(v) for k, v in extra.items()})
        return base

    return SimpleNamespace(
        root=root,
        acl=acl,
        kernel=kernel,
        env=env,
        report=lambda: json.loads((root / "report.json").read_text()),
    )


def clean_env():
    """This process's environment without anything that steers the NPU path."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ASCEND_", "PYPTO_NPU_", "FAKE_ACL_", "FAKE_KERNEL_"))
        and k not in ("PYPTO_DEVICE", "PYPTO_CACHE_DIR")
    }


PRELUDE = textwrap.dedent("""
    import ctypes, json, os, sys
    import numpy as np
    import pypto
    from pypto import pypto_impl
    from pypto._core.rules import validate_conv_backward_input
    from pypto._kernels.dispatch import conv_backward_input_cpu
    import pypto.device as device

    def make_call(case):
        dt = getattr(pypto, case["dtype"])
        pypto.set_convbp_input_tile_shapes(pypto_impl.ConvBpTileL1Info(*case["l1"]),
                                           pypto_impl.ConvBpTileL0Info(*case["l0"]))
        pypto.set_vec_tile_shapes(16, 16, 16, 16)
        return validate_conv_backward_input(
            pypto.Tensor(case["dy"], dt), case["input_size"], pypto.Tensor(case["w"], dt), dt,
            case["strides"], case["paddings"], case["dilations"])

    def arrays(case, exact, seed=0):
        # exact: small integers, so every fp32 sum is exact and any summation order gives the
        # same once-rounded result; else uniform(-1, 1)
        rng = np.random.default_rng(seed)
        np_dtype = pypto._dtypes.numpy_dtype(getattr(pypto, case["dtype"]))
        draw = (lambda s: rng.integers(-4, 5, s)) if exact else (lambda s: rng.uniform(-1, 1, s))
        return draw(case["dy"]).astype(np_dtype), draw(case["w"]).astype(np_dtype)

    def fake_counter(name):
        lib = ctypes.CDLL(os.path.join(os.environ["ASCEND_HOME_PATH"], "lib64", "libascendcl.so"))
        lib.fake_acl_counter.restype = ctypes.c_long
        lib.fake_acl_counter.argtypes = [ctypes.c_char_p]
        return lib.fake_acl_counter(name.encode())

    def emit(value):
        print("RESULT " + json.dumps(value))
""")


def run_python(code, env, expect_rc=0):
    """Run PRELUDE + code in a fresh interpreter; the value it emit()ted."""
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=limit(300),
        cwd=str(ROOT / "tests"),
    )
    assert done.returncode == expect_rc, f"rc={done.returncode}\n{done.stdout}\n{done.stderr}"
    results = [
        line[len("RESULT ") :] for line in done.stdout.splitlines() if line.startswith("RESULT ")
    ]
    return json.loads(results[-1]) if results else None


# --- no NPU here ------------------------------------------------------------------------------
@pytest.mark.skipif(
    any(n.startswith("davinci") for n in os.listdir("/dev")),
    reason="this machine has an Ascend device node",
)
def test_without_an_npu_is_available_is_false_fast_and_loads_nothing():
    result = run_python(
        """
        import time
        maps_after_import = open("/proc/self/maps").read()
        start = time.perf_counter()
        available = device.is_available()
        seconds = time.perf_counter() - start
        emit(dict(available=available, ms=seconds * 1e3, reason=device.unavailable_reason(),
                  acl_mapped=("ascendcl" in maps_after_import + open("/proc/self/maps").read()),
                  runtime_imported="pypto._npu.runtime" in sys.modules))
    """,
        clean_env(),
    )
    assert result["available"] is False
    assert result["ms"] < limit(10), result
    assert "/dev/davinci" in result["reason"]
    assert not result["acl_mapped"] and not result["runtime_imported"]


def test_npu_requested_without_an_npu_raises_and_auto_computes_on_the_cpu(tmp_path):
    result = run_python(
        """
        out = {}
        for how in ("env", "set_device"):
            if how == "set_device":
                device.set_device("npu")
            try:
                device.select_backend()
            except pypto.PyptoError as exc:
                out[how] = [type(exc).__name__, str(exc)]
        device.set_device("auto")
        out["auto"] = device.select_backend()
        device.set_device(None)
        os.environ["PYPTO_DEVICE"] = "gpu"
        try:
            device.get_device()
        except pypto.PyptoError as exc:
            out["bad"] = str(exc)
        os.environ["PYPTO_DEVICE"] = "auto"
        case = dict(dtype="DT_FP16", dy=[1, 16, 5, 32], w=[16, 16, 3, 3], input_size=[1, 16, 5, 32],
                    strides=[1, 1], paddings=[1, 1, 1, 1], dilations=[1, 1], l1=[16, 144, 16],
                    l0=[16, 16, 16])
        call = make_call(case)
        dy, w = arrays(case, exact=False)
        op = pypto.conv_backward_input(pypto.from_numpy(dy), case["input_size"],
                                       pypto.from_numpy(w), pypto.DT_FP16, [1, 1], [1, 1, 1, 1],
                                       [1, 1]).numpy()
        out["auto_equals_cpu"] = bool(np.array_equal(op, conv_backward_input_cpu(call, dy, w)))
        emit(out)
    """,
        dict(clean_env(), PYPTO_DEVICE="npu", PYPTO_NPU_DEV_DIR=str(tmp_path)),
    )
    for how, source in (("env", "PYPTO_DEVICE=npu"), ("set_device", "pypto.set_device('npu')")):
        name, text = result[how]
        assert name == "NpuUnavailableError"
        assert text.startswith("ErrCode: F00003, RuntimeError: ") and source in text
        assert "no Ascend NPU device node" in text
    assert result["auto"] == "cpu" and result["auto_equals_cpu"]
    assert "PYPTO_DEVICE='gpu'" in result["bad"] and "auto, cpu, npu" in result["bad"]


@pytest.mark.skipif(
    "select_backend" not in inspect.getsource(importlib.import_module("pypto._convbp")),
    reason="conv_backward_input does not dispatch to pypto.device yet",
)
def test_the_op_raises_when_the_npu_is_requested_but_missing(tmp_path):
    result = run_python(
        """
        try:
            pypto.set_convbp_input_tile_shapes(pypto_impl.ConvBpTileL1Info(16, 144, 16),
                                               pypto_impl.ConvBpTileL0Info(16, 16, 16))
            pypto.set_vec_tile_shapes(16, 16, 16, 16)
            dy = pypto.from_numpy(np.ones((1, 16, 5, 32), np.float16))
            w = pypto.from_numpy(np.ones((16, 16, 3, 3), np.float16))
            pypto.conv_backward_input(dy, [1, 16, 5, 32], w, pypto.DT_FP16, [1, 1], [1, 1, 1, 1],
                                      [1, 1])
            emit("computed")
        except device.NpuUnavailableError as exc:
            emit(str(exc))
    """,
        dict(clean_env(), PYPTO_DEVICE="npu", PYPTO_NPU_DEV_DIR=str(tmp_path)),
    )
    assert "PYPTO_DEVICE=npu" in result and "no Ascend NPU device node" in result


# --- the launch struct is the header's ---------------------------------------------------------
@needs_cc
def test_ctypes_launch_struct_matches_the_c_header(tmp_path):
    fields = [
        (name, getattr(layout.ConvDxLaunch, name)) for name, _ in layout.ConvDxLaunch._fields_
    ]
    fields += [
        (f"api.{name}", getattr(layout.ConvDxApiTiling, name))
        for name, _ in layout.ConvDxApiTiling._fields_
    ]
    constants = {
        "PYPTO_CONV_DX_MAGIC": layout.MAGIC,
        "PYPTO_CONV_DX_API_TILING_BYTES": layout.API_TILING_BYTES,
        "PYPTO_CONV_DX_LAUNCH_BYTES": layout.LAUNCH_BYTES,
        "PYPTO_CONV_DX_DONE_SLOT_BYTES": layout.DONE_SLOT_BYTES,
        "PYPTO_CONV_DX_MAX_BLOCKS": layout.MAX_BLOCKS,
        "PYPTO_CONV_DX_FP16": layout.FP16,
        "PYPTO_CONV_DX_BF16": layout.BF16,
        "PYPTO_CONV_DX_B2_BASEK_LT_HKWK": layout.B2_BASEK_LT_HKWK,
        "PYPTO_CONV_DX_B2_BASEK_GE_HKWK": layout.B2_BASEK_GE_HKWK,
        "PYPTO_CONV_DX_B2_HKWK_EQ_ONE": layout.B2_HKWK_EQ_ONE,
    }
    lines = [
        "#include <stdio.h>",
        '#include "pypto_conv_dx_tiling.h"',
        '#define NAME(f) printf("header_field %s\\n", #f);',
        "int main(void) {",
        'printf("sizeof api %zu\\n", sizeof(PyptoConvDxApiTiling));',
        'printf("sizeof launch %zu\\n", sizeof(PyptoConvDxLaunch));',
        "PYPTO_CONV_DX_API_U32_FIELDS(NAME) PYPTO_CONV_DX_API_I32_FIELDS(NAME) "
        "PYPTO_CONV_DX_API_U64_FIELDS(NAME)",
    ]
    lines += [
        f'printf("field {name} %zu %zu\\n", offsetof(PyptoConvDxLaunch, {name}), '
        f"sizeof(((PyptoConvDxLaunch *)0)->{name}));"
        for name, _ in fields
        if name != "api"
    ]
    lines += [f'printf("const {c} %llu\\n", (unsigned long long)({c}));' for c in constants]
    lines += ["return 0;", "}"]
    source, exe = tmp_path / "layout.c", tmp_path / "layout"
    source.write_text("\n".join(lines))
    _compile(["-std=c11", f"-I{KERNEL_SOURCES}", str(source), "-o", str(exe)])
    printed = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split(
        "\n"
    )
    seen = {tuple(line.split()[:2]): line.split()[2:] for line in printed if line}

    assert seen[("sizeof", "api")] == [str(ctypes.sizeof(layout.ConvDxApiTiling))] == ["280"]
    assert seen[("sizeof", "launch")] == [str(ctypes.sizeof(layout.ConvDxLaunch))] == ["328"]
    header_fields = [line.split()[1] for line in printed if line.startswith("header_field")]
    assert header_fields == [name for name, _ in layout.ConvDxApiTiling._fields_]
    for name, descriptor in fields:
        if name == "api":
            assert descriptor.offset == 48
            continue
        offset = descriptor.offset + (
            layout.ConvDxLaunch.api.offset if name.startswith("api.") else 0
        )
        assert seen[("field", name)] == [str(offset), str(descriptor.size)], name
    for name, value in constants.items():
        assert seen[("const", name)] == [str(value)], name


# --- results through the NPU path equal the CPU kernel's --------------------------------------
def _case(name, dy, w, input_size, strides, paddings, dilations, l1, l0, **extra):
    return dict(
        name=name,
        dy=dy,
        w=w,
        input_size=input_size,
        strides=strides,
        paddings=paddings,
        dilations=dilations,
        l1=l1,
        l0=l0,
        **extra,
    )


CASES = [
    _case(
        "spec example",
        [1, 16, 5, 32],
        [16, 16, 3, 3],
        [1, 16, 5, 32],
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        [16, 144, 16],
        [16, 16, 16],
    ),
    _case(
        "Cin/Cout not multiples of 16, stride 2, last row unreached",
        [2, 20, 7, 9],
        [20, 13, 3, 3],
        [2, 13, 14, 18],
        [2, 2],
        [1, 1, 1, 1],
        [1, 1],
        [18, 144, 16],
        [16, 48, 16],
        expect_zero_output=True,
    ),
    _case(
        "dilation, unequal strides, tiles inside a row",
        [1, 17, 5, 6],
        [17, 33, 3, 5],
        [1, 33, 10, 23],
        [2, 3],
        [2, 2, 1, 1],
        [2, 2],
        [8, 480, 32],
        [16, 240, 16],
    ),
    _case(
        "1x1 kernel, stride 2: positions nothing reaches",
        [2, 17, 4, 5],
        [17, 33, 1, 1],
        [2, 33, 8, 10],
        [2, 2],
        [0, 0, 0, 0],
        [1, 1],
        [10, 16, 32],
        [16, 16, 16],
        expect_zero_output=True,
    ),
    _case(
        "stride larger than the kernel",
        [1, 20, 4, 4],
        [20, 13, 2, 2],
        [1, 13, 12, 12],
        [3, 3],
        [0, 0, 0, 0],
        [1, 1],
        [24, 64, 16],
        [16, 64, 16],
        expect_zero_output=True,
    ),
    _case(
        "wide dilated image: W split into stripes",
        [1, 16, 45, 600],
        [16, 16, 3, 3],
        [1, 16, 45, 600],
        [1, 1],
        [20, 20, 20, 20],
        [20, 20],
        [16, 144, 16],
        [16, 16, 16],
        expect_stripes=2,
    ),
    _case(
        "backprop padding over 255: a zero halo of dy rows",
        [1, 16, 2, 5],
        [16, 16, 7, 1],
        [1, 16, 260, 5],
        [1, 1],
        [0, 0, 0, 0],
        [43, 1],
        [5, 112, 16],
        [16, 16, 16],
        expect_halo=True,
    ),
    _case(
        "tall stride over a long row: stripes keep the 16-bit dy copy stride",
        [1, 16, 2, 1100],
        [16, 16, 1, 1],
        [1, 16, 64, 1100],
        [63, 1],
        [0, 0, 0, 0],
        [1, 1],
        [16, 16, 16],
        [16, 16, 16],
        expect_stripes=2,
        expect_zero_output=True,
    ),
    _case(
        "more blocks than one launch takes: batch chunks",
        [3, 16, 6, 6],
        [16, 32, 3, 3],
        [3, 32, 6, 6],
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        [6, 144, 16],
        [16, 16, 16],
        max_blocks=5,
        expect_launches=3,
    ),
    _case(
        "ResNet 3x3 layer",
        [1, 64, 56, 56],
        [64, 64, 3, 3],
        [1, 64, 56, 56],
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        [112, 576, 64],
        [112, 144, 64],
    ),
    # What no single launch fits (pypto/_npu/decompose.py):
    _case(
        "dilation 63: 63x63 dilation phases",
        [1, 16, 130, 130],
        [16, 16, 3, 3],
        [1, 16, 256, 256],
        [1, 1],
        [0, 0, 0, 0],
        [63, 63],
        [1, 144, 16],
        [16, 16, 16],
        expect_pieces=63 * 63,
    ),
    _case(
        "stride 62 across a 27x35 kernel: stride phases",
        [1, 16, 27, 1],
        [16, 16, 27, 35],
        [1, 16, 53, 41],
        [1, 62],
        [0, 0, 0, 0],
        [1, 1],
        [1, 15120, 16],
        [16, 16, 16],
        expect_pieces=35,
    ),
    _case(
        "stride 7 with dilations 32x19: stride then dilation phases, negative padding",
        [1, 16, 39, 92],
        [16, 16, 6, 6],
        [1, 16, 218, 1],
        [7, 1],
        [106, 106, 93, 93],
        [32, 19],
        [1, 576, 16],
        [16, 16, 16],
        expect_pieces=6,
    ),
    _case(
        "dilation phases whose windows needed more top padding than an M block loads (the API's "
        "row count wrapped before the planner kept pads within the reach)",
        [3, 1, 13, 1],
        [1, 40, 16, 1],
        [3, 40, 630, 2],
        [15, 22],
        [170, 170, 0, 0],
        [52, 2],
        [1, 256, 64],
        [16, 16, 64],
        expect_pieces=15,
    ),
    _case(
        "962 taps: kernel rows folded into channels",
        [1, 16, 42, 27],
        [16, 16, 37, 26],
        [1, 16, 78, 52],
        [1, 1],
        [0, 0, 0, 0],
        [1, 1],
        [1, 15392, 16],
        [16, 16, 16],
        expect_folded=True,
    ),
]


@pytest.mark.parametrize("dtype", ["DT_FP16", "DT_BF16"])
def test_npu_path_equals_the_cpu_kernel(fake_ascend, dtype):
    """Exact data: bitwise equal (any fp32 summation order gives the same rounded value).

    Random data: the fake and the CPU kernel sum in different orders, so they agree within
    one output ulp plus twice the fp32 accumulation bound K * 2^-24 * sum|dy*w| (on ResNet-size
    K, cancellation makes that tens of ulps on values near zero; the test reports the maximum).
    """
    cases = [dict(case, dtype=dtype) for case in CASES]
    results = run_python(
        f"""
        import pypto._core.tiling as tiling_module
        import pypto._npu.plan as plan_module
        from pypto._npu.plan import plan_launches
        out = []
        for case in {cases!r}:
            if "max_blocks" in case:
                # the task grid's limit and the plan's (one value, imported by both)
                tiling_module.MAX_BLOCKS = plan_module.MAX_BLOCKS = case["max_blocks"]
                plan_module._plan.cache_clear()
            call = make_call(case)
            plan = plan_launches(call)
            dy, w = arrays(case, exact=True)
            mallocs = fake_counter("malloc")
            npu, cpu = (device.conv_backward_input_npu(call, dy, w),
                        conv_backward_input_cpu(call, dy, w))
            mallocs = fake_counter("malloc") - mallocs
            exact = bool(npu.dtype == cpu.dtype
                         and np.array_equal(npu.view(np.uint16), cpu.view(np.uint16)))
            dy, w = arrays(case, exact=False, seed=1)
            npu, cpu = (device.conv_backward_input_npu(call, dy, w),
                        conv_backward_input_cpu(call, dy, w))
            size = np.abs(conv_backward_input_cpu(call, np.abs(dy), np.abs(w)).astype(np.float64))
            a, b = npu.astype(np.float64), cpu.astype(np.float64)
            mantissa, emin = (10, -14) if case["dtype"] == "DT_FP16" else (7, -126)
            ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.maximum(abs(a), abs(b)), 2.0 ** emin)))
                          - mantissa)
            k = case["w"][0] * case["w"][2] * case["w"][3]
            bound = ulp + 2 * k * 2.0 ** -24 * size * 1.01
            whole = plan.pieces[0].launches
            out.append(dict(name=case["name"], exact=exact,
                            within=bool(np.all(np.abs(a - b) <= bound)),
                            max_ulp=float((np.abs(a - b) / ulp).max()),
                            pieces=len(plan.pieces), mallocs=mallocs,
                            folded=any(pp.piece.groups > 1 for pp in plan.pieces),
                            stripes=sum(s.api is not None for s in whole.stripes),
                            halo=whole.rows.first < 0, zero_output=whole.zero_output,
                            launches=plan.launch_count))
            tiling_module.MAX_BLOCKS = plan_module.MAX_BLOCKS = 65535
        out.append(dict(faults=fake_counter("kernel_faults"),
                        live=fake_counter("live_allocations")))
        emit(out)
    """,
        fake_ascend.env(PYPTO_DEVICE="npu"),
    )
    totals = results.pop()
    assert totals == dict(faults=0, live=0)
    for case, result in zip(CASES, results):
        assert result["exact"], result
        assert result["within"], result
        assert result["pieces"] == case.get("expect_pieces", 1), result
        assert result["mallocs"] == 4, result  # weight, dy, dx, workspace: reused by every launch
        assert result["folded"] == case.get("expect_folded", False), result
        if result["pieces"] == 1:
            assert result["stripes"] == case.get("expect_stripes", 1), result
            assert result["halo"] == case.get("expect_halo", False), result
            assert result["launches"] == case.get("expect_launches", result["stripes"]), result
        if case.get("expect_zero_output"):
            assert result["zero_output"], result


def test_a_problem_without_a_plan_goes_to_the_cpu_in_auto_and_raises_in_npu_mode(
    fake_ascend, tmp_path
):
    """The safety net: were a problem to fit no launch even after the rewrites (simulated by an
    L1 the API cannot use at all), ``auto`` computes it on the CPU and ``npu`` says why."""
    case = _case(
        "no L1",
        [1, 16, 5, 32],
        [16, 16, 3, 3],
        [1, 16, 5, 32],
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        [16, 144, 16],
        [16, 16, 16],
        dtype="DT_FP16",
    )
    result = run_python(
        f"""
        import pypto._npu.plan as plan_module
        plan_module.L1_API_BYTES = 0
        call = make_call({case!r})
        out = dict(auto=device.select_backend(call))
        device.set_device("npu")
        for name, run in (("select", lambda: device.select_backend(call)),
                          ("op",
                           lambda: device.conv_backward_input_npu(call, *arrays({case!r}, True)))):
            try:
                run()
            except device.NpuUnavailableError as exc:
                out[name] = [type(exc).__name__, str(exc)]
        out["mallocs"] = fake_counter("malloc")
        emit(out)
    """,
        fake_ascend.env(PYPTO_CACHE_DIR=str(tmp_path)),
    )  # its self-check fails: not shared
    assert result["auto"] == "cpu" and result["mallocs"] == 0
    assert result["select"][0] == "NpuUnavailableError" and result["op"][0] == "NpuUnsupportedError"
    for _, text in (result["select"], result["op"]):
        assert "no launch of AscendC's Conv3DBackpropInput fits" in text and "CPU" in text


def test_the_npu_path_checks_host_memory_before_touching_the_device(fake_ascend):
    """The memory limit covers the NPU path's host copies (re-laid-out dy, weight, dx; a folded
    problem's dy copies): above it, PyptoMemoryError before any device call; the estimate
    covers what the path really allocates."""
    case = dict(next(c for c in CASES if c.get("expect_folded")), dtype="DT_FP16")
    result = run_python(
        f"""
        import tracemalloc
        from pypto._npu.plan import plan_launches
        call = make_call({case!r})
        dy, w = arrays({case!r}, True)
        estimate = plan_launches(call).host_bytes(call.problem)
        try:
            with pypto.options(memory_limit=estimate // 2):
                device.conv_backward_input_npu(call, dy, w)
            refused = None
        except pypto.error.PyptoMemoryError as exc:
            refused = str(exc)
        mallocs = fake_counter("malloc")
        tracemalloc.start()
        device.conv_backward_input_npu(call, dy, w)
        peak = tracemalloc.get_traced_memory()[1]
        emit(dict(refused=refused, mallocs=mallocs, estimate=estimate, peak=peak))
    """,
        fake_ascend.env(PYPTO_DEVICE="npu"),
    )
    assert result["refused"] and "NPU's layouts" in result["refused"], result
    assert result["mallocs"] == 0
    assert result["peak"] <= result["estimate"], result


# --- failures: a clear exception, and nothing left allocated -----------------------------------
def test_injected_failures_raise_clear_errors_and_free_every_buffer(fake_ascend):
    injections = [
        ("FAKE_ACL_FAIL_MALLOC", "3"),
        ("FAKE_ACL_FAIL_MEMCPY", "2"),
        ("FAKE_ACL_FAIL_MEMCPY", "4"),
        ("FAKE_ACL_FAIL_LAUNCH", "1"),
        ("FAKE_ACL_FAIL_SYNC", "1"),
        ("FAKE_ACL_SKIP_LAUNCH", "1"),
    ]
    results = run_python(
        f"""
        lib = ctypes.CDLL(os.path.join(os.environ["ASCEND_HOME_PATH"], "lib64", "libascendcl.so"))
        case = dict(dtype="DT_FP16", dy=[2, 20, 7, 9], w=[20, 13, 3, 3], input_size=[2, 13, 14, 18],
                    strides=[2, 2], paddings=[1, 1, 1, 1], dilations=[1, 1], l1=[18, 144, 16],
                    l0=[16, 48, 16])
        call = make_call(case)
        dy, w = arrays(case, exact=True)
        out = []
        for variable, value in {injections!r}:
            lib.fake_acl_reset_call_counts()
            os.environ[variable] = value
            try:
                device.conv_backward_input_npu(call, dy, w)
                out.append(dict(raised=None))
            except pypto.PyptoError as exc:
                out.append(dict(raised=type(exc).__name__, acl=isinstance(exc, device.AclError),
                                code=exc.code, api=exc.api, text=str(exc),
                                live=fake_counter("live_allocations")))
            del os.environ[variable]
        recovered = device.conv_backward_input_npu(call, dy, w)
        out.append(dict(recovered=bool(np.array_equal(recovered,
                                                      conv_backward_input_cpu(call, dy, w))),
                        live=fake_counter("live_allocations")))
        emit(out)
    """,
        fake_ascend.env(),
    )
    expected = [
        ("AclResourceError", 207001, "aclrtMalloc", "out of device memory (injected"),
        ("AclInternalError", 507899, "aclrtMemcpy", "copy engine error (injected"),
        ("AclInternalError", 507899, "aclrtMemcpy", "copy engine error (injected"),
        ("AclInternalError", 507000, "aclrtlaunch_pypto_conv_dx", "launch rejected"),
        ("AclInternalError", 507015, "aclrtSynchronizeStream", "AI Core exception"),
        ("KernelNotRunError", 0, "aclrtlaunch_pypto_conv_dx", "did not run"),
    ]
    assert results.pop() == dict(recovered=True, live=0)
    for (name, code, api, words), result in zip(expected, results):
        assert result["raised"] == name and result["acl"], result
        assert (result["code"], result["api"]) == (code, api), result
        assert result["text"].startswith("ErrCode: F00003, RuntimeError: " + api), result
        assert words in result["text"] and (str(code) in result["text"] or code == 0), result
        assert result["live"] == 0, result


# --- lifecycle: threads, fork, exit -------------------------------------------------------------
SPEC_CASE = dict(
    dtype="DT_FP16",
    dy=[1, 16, 5, 32],
    w=[16, 16, 3, 3],
    input_size=[1, 16, 5, 32],
    strides=[1, 1],
    paddings=[1, 1, 1, 1],
    dilations=[1, 1],
    l1=[16, 144, 16],
    l0=[16, 16, 16],
)


@pytest.mark.parametrize("initialised_elsewhere", [False, True])
def test_teardown_at_exit_releases_everything_and_finalizes_only_our_init(
    fake_ascend, initialised_elsewhere
):
    extra = {"FAKE_ACL_PREINIT": "1"} if initialised_elsewhere else {}
    result = run_python(
        f"""
        call = make_call({SPEC_CASE!r})
        dy, w = arrays({SPEC_CASE!r}, exact=True)
        emit(bool(np.array_equal(device.conv_backward_input_npu(call, dy, w),
                                 conv_backward_input_cpu(call, dy, w))))
    """,
        fake_ascend.env(**extra),
    )
    report = fake_ascend.report()
    assert result is True
    assert report["init"] == 1 and report["finalize"] == (0 if initialised_elsewhere else 1)
    assert report["set_device"] == report["reset_device"] == 1
    assert report["contexts_created"] == report["streams_created"] == 1
    assert report["live_allocations"] == report["live_contexts"] == report["live_streams"] == 0
    assert report["kernel_runs"] == 1 and report["kernel_faults"] == 0


def test_calls_from_other_threads_bind_the_context_and_init_once(fake_ascend):
    result = run_python(
        f"""
        import threading
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(8) as pool:
            available = list(pool.map(lambda _: device.is_available(), range(8)))
        call = make_call({SPEC_CASE!r})
        dy, w = arrays({SPEC_CASE!r}, exact=True)
        expected = conv_backward_input_cpu(call, dy, w)
        with ThreadPoolExecutor(3) as pool:  # none of these threads brought the runtime up
            outs = list(pool.map(lambda _: device.conv_backward_input_npu(call, dy, w), range(6)))
        emit(dict(available=available, equal=[bool(np.array_equal(o, expected)) for o in outs],
                  init=fake_counter("init"), set_device=fake_counter("set_device"),
                  live=fake_counter("live_allocations")))
    """,
        fake_ascend.env(),
    )
    assert result == dict(available=[True] * 8, equal=[True] * 6, init=1, set_device=1, live=0)


def test_a_forked_child_refuses_the_parents_runtime(fake_ascend):
    result = run_python(
        f"""
        call = make_call({SPEC_CASE!r})
        dy, w = arrays({SPEC_CASE!r}, exact=True)
        device.conv_backward_input_npu(call, dy, w)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            child = {{}}
            try:
                device.conv_backward_input_npu(call, dy, w)
            except device.NpuUnavailableError as exc:
                child["error"] = str(exc)
            child["available"] = device.is_available()
            pypto._npu.runtime.get().close()  # atexit's teardown must not touch the parent's
            child["finalize"] = fake_counter("finalize")
            child["reset"] = fake_counter("reset_device")
            os.write(write, json.dumps(child).encode())
            os._exit(0)
        os.close(write)
        child = json.loads(os.read(read, 65536))
        os.waitpid(pid, 0)
        emit(child)
    """,
        fake_ascend.env(),
    )
    assert "forked child" in result["error"] and "spawn" in result["error"]
    assert result["available"] is False
    assert result["finalize"] == 0 and result["reset"] == 0


@pytest.mark.parametrize(
    "setting, words, inits",
    [
        (dict(FAKE_ACL_SOC="Ascend310P3"), ["Ascend310P3", "A2/A3"], 1),
        (dict(FAKE_ACL_DEVICE_COUNT="0"), ["sees no NPU", "ASCEND_RT_VISIBLE_DEVICES"], 1),
        (
            dict(PYPTO_NPU_KERNEL_LIB="/nonexistent/libpypto_conv_dx.so"),
            ["PYPTO_NPU_KERNEL_LIB"],
            0,
        ),
    ],
)
def test_unavailable_reasons_are_specific_and_bring_up_is_undone(
    fake_ascend, setting, words, inits
):
    result = run_python(
        """
        reason = device.unavailable_reason()
        try:
            device.select_backend()
            raised = None
        except device.NpuUnavailableError as exc:
            raised = str(exc)
        emit(dict(available=device.is_available(), reason=reason, raised=raised,
                  init=fake_counter("init"), live_streams=fake_counter("live_streams"),
                  live_contexts=fake_counter("live_contexts")))
    """,
        fake_ascend.env(PYPTO_DEVICE="npu", **setting),
    )
    assert result["available"] is False
    assert all(word in result["reason"] for word in words), result
    assert result["reason"] in result["raised"]
    assert result["init"] == inits and result["live_streams"] == result["live_contexts"] == 0
    assert fake_ascend.report()["finalize"] == inits  # a failed bring-up undoes its aclInit


@pytest.mark.parametrize("which", ["kernel", "acl"])
@pytest.mark.parametrize("keep", [0, 63, 64, 700, "half", "all but one"])
def test_a_truncated_library_is_refused_before_it_is_loaded(fake_ascend, tmp_path, which, keep):
    """glibc's dlopen itself ends the process (SIGBUS) on a library whose segments run past the
    end of the file: pypto info, is_available() and an auto-mode call must see "unavailable"."""
    source = fake_ascend.kernel if which == "kernel" else fake_ascend.acl
    data = source.read_bytes()
    size = {"half": len(data) // 2, "all but one": len(data) - 1}.get(keep, keep)
    if which == "kernel":
        broken = tmp_path / "libpypto_conv_dx.so"
        env = fake_ascend.env(PYPTO_NPU_KERNEL_LIB=broken)
    else:
        broken = tmp_path / "lib64" / "libascendcl.so"
        broken.parent.mkdir()
        env = fake_ascend.env(ASCEND_HOME_PATH=tmp_path)
    broken.write_bytes(data[:size])
    result = run_python(
        """
        reason = device.unavailable_reason()
        case = dict(dtype="DT_FP16", dy=[1, 16, 5, 32], w=[16, 16, 3, 3], input_size=[1, 16, 5, 32],
                    strides=[1, 1], paddings=[1, 1, 1, 1], dilations=[1, 1], l1=[16, 144, 16],
                    l0=[16, 16, 16])
        call = make_call(case)
        dy, w = arrays(case, exact=False)
        op = pypto.conv_backward_input(pypto.from_numpy(dy), case["input_size"],
                                       pypto.from_numpy(w), pypto.DT_FP16, [1, 1], [1, 1, 1, 1],
                                       [1, 1]).numpy()
        emit(dict(available=device.is_available(), reason=reason,
                  auto_equals_cpu=bool(np.array_equal(op, conv_backward_input_cpu(call, dy, w)))))
    """,
        env,
    )
    assert result["available"] is False and result["auto_equals_cpu"]
    assert str(broken) in result["reason"], result
    assert any(word in result["reason"] for word in ("truncated", "shorter than an ELF header"))
    info = subprocess.run(
        [sys.executable, "-m", "pypto", "info"],
        capture_output=True,
        text=True,
        env=env,
        timeout=limit(120),
        cwd=str(ROOT / "tests"),
    )
    assert info.returncode == 0, info.stderr
    assert str(broken) in info.stdout


def test_files_that_are_no_shared_library_are_refused_with_the_reason(tmp_path):
    from pypto._npu.elf import elf_problem

    text = tmp_path / "text.so"
    text.write_text("not a library\n" * 10)
    assert elf_problem(text) == "it is not an ELF file"
    assert elf_problem(tmp_path / "missing.so").startswith("cannot read it")
    assert elf_problem(tmp_path).startswith("cannot read it")
    program = Path(sys.executable).resolve()
    assert elf_problem(program) in (None, "it is not a shared library (ELF type 2)")  # PIE or not
    header = bytearray(program.read_bytes()[:64])
    header[4] = 1  # 32-bit class
    (tmp_path / "elf32.so").write_bytes(bytes(header))
    assert elf_problem(tmp_path / "elf32.so") == "it is not a 64-bit little-endian ELF file"


def test_a_missing_acl_library_names_where_it_looked(fake_ascend, tmp_path):
    result = run_python(
        "emit(device.unavailable_reason())", fake_ascend.env(ASCEND_HOME_PATH=tmp_path)
    )
    assert "libascendcl.so not found" in result and str(tmp_path / "lib64") in result


# --- the AscendC API's envelope, as the fake kernel checks it -----------------------------------
@pytest.fixture(scope="module")
def envelope(fake_ascend):
    """The fake kernel's envelope check (fake_conv_dx_envelope) on one launch struct: '' or why."""
    ctypes.CDLL(str(fake_ascend.acl), mode=ctypes.RTLD_GLOBAL)  # the kernel library's imports
    check = ctypes.CDLL(str(fake_ascend.kernel)).fake_conv_dx_envelope
    check.argtypes = [ctypes.POINTER(layout.ConvDxLaunch), ctypes.c_char_p, ctypes.c_size_t]
    check.restype = ctypes.c_int

    def run(launch):
        error = ctypes.create_string_buffer(512)
        return error.value.decode() if check(ctypes.byref(launch), error, len(error)) else ""

    return run


def _plan_launches(p, t, dtype=None):
    """One launch struct per launch stripe of every piece of the call's plan."""
    from pypto._dtypes import DataType
    from pypto._npu.plan import _call_plan

    plan = _call_plan(p, t, dtype or DataType.DT_FP16)
    return [
        (pp, pp.launches.launch(stripe, 0, 1, 0, 1)) for pp in plan.pieces for stripe in pp.runs
    ]


def test_the_envelope_check_sees_a_wrapped_row_count_and_an_empty_block(envelope):
    from pypto._core.tiling import ConvProblem, Tiling

    p = ConvProblem(1, 16, 16, 12, 12, 12, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1)
    ((_, launch),) = _plan_launches(p, Tiling(12, 144, 16, 16, 16, 16))
    assert envelope(launch) == ""
    wrapped = layout.ConvDxLaunch.from_buffer_copy(launch)
    wrapped.api.backpropPadUp = 9  # more than the 5 rows (3 + reach 2) an M block loads
    assert "wraps UpdateCurHoSize" in envelope(wrapped)
    empty = layout.ConvDxLaunch.from_buffer_copy(launch)
    empty.api.backpropPadUp = 5  # the first block's rows start exactly past what it loads
    assert "loads no dy row" in envelope(empty)
    empty.api.initOutputFlag = 1  # skipped by the API then, which is inside its envelope
    assert envelope(empty) == ""


def test_the_reviewed_case_stays_inside_the_api_envelope(envelope):
    """Issue 13's finding 2: one dilation-phase piece had backpropPadUp 8 over a 2-row window."""
    from support.npu_problems import ENVELOPE_CASE

    faults = [
        (pp.piece, why)
        for pp, launch in _plan_launches(*ENVELOPE_CASE)
        if (why := envelope(launch))
    ]
    assert not faults, faults[:3]


def test_every_launch_of_extreme_accepted_problems_stays_inside_the_api_envelope(envelope):
    from pypto._dtypes import DataType
    from support.npu_problems import extreme_problem, legal_tiles

    rng = random.Random(13)
    checked = 0
    while checked < 1500:
        p = extreme_problem(rng)
        t = p and legal_tiles(rng, p)
        if t is None:
            continue
        for pp, launch in _plan_launches(p, t, rng.choice([DataType.DT_FP16, DataType.DT_BF16])):
            why = envelope(launch)
            assert not why, (p, t, pp.piece, why)
        checked += 1


# --- planning: windows and tile mapping, without a runtime --------------------------------------
def test_axis_windows_cover_every_contribution_with_padding_inside_the_api_envelope():
    """Forward pads of the op's range and of sub-problems (negative, or beyond the reach): the
    window's backprop pads stay in [0, min(reach, 255)], or [0, stride - 1] when that is larger."""
    rng = random.Random(4)
    for _ in range(4000):
        kernel = rng.choice([1, 2, 3, rng.randint(1, 255)])
        stride, dilation = rng.randint(1, 63), rng.choice([1, 2, rng.randint(1, 63)])
        reach = (kernel - 1) * dilation
        pad = rng.choice(
            [
                rng.randint(0, min(255, reach)),
                rng.randint(-300, -1),
                rng.randint(reach, reach + 300),
            ]
        )
        size_out = rng.randint(1, 40)
        size_in = (size_out - 1) * stride - 2 * max(pad, 0) + reach + 1 + rng.randint(0, stride - 1)
        size_in = max(size_in, 1) if pad >= 0 and pad <= reach else rng.randint(1, 400)
        start = rng.randint(0, size_in - 1)
        stop = rng.randint(start + 1, size_in)
        window = axis_window(start, stop, size_out, kernel, stride, pad, dilation)
        reached = [
            j
            for j in range(size_out)
            if any(start <= j * stride - pad + t * dilation < stop for t in range(kernel))
        ]
        if window is None:
            assert not reached
            continue
        bound = max(min(reach, MAX_BACKPROP_PAD), stride - 1)
        assert 0 <= window.pad_before <= bound and 0 <= window.pad_after <= bound, (window, bound)
        # the full convolution of the padded, stride-dilated window yields exactly the dx range
        assert (
            window.pad_before + (window.count - 1) * stride + 1 + window.pad_after - reach
            == stop - start
        )
        assert all(window.first <= j < window.first + window.count for j in reached)


def test_user_tiles_map_onto_the_api_fields():
    from pypto._core.tiling import ConvProblem, Tiling
    from pypto._dtypes import DataType
    from pypto._npu.plan import _plan

    p = ConvProblem(2, 40, 20, 14, 18, 7, 9, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1)
    plan = _plan(p, Tiling(36, 288, 32, 32, 64, 16), DataType.DT_BF16)
    api = plan.stripes[0].api
    assert (plan.rows_per_task, plan.cin_per_task, plan.m_tasks, plan.n_tasks) == (2, 32, 7, 2)
    assert (api.baseM, api.baseN) == (32, 16)
    # tileKL0 = 64 neither divides nor is a multiple of Kh*Kw*16 = 144: the largest legal baseK
    # that divides tileKL1 = 288 is 48, so the weight L1 block is 6 steps deep
    assert (api.baseK, api.stepKb, api.stepKa) == (48, 6, 6)
    assert plan.stripes[0].load_b2_mode == layout.B2_BASEK_LT_HKWK
    assert (api.backpropPadUp, api.backpropPadDown, api.backpropPadLeft, api.backpropPadRight) == (
        1,
        2,
        1,
        2,
    )
    assert plan.dtype_code == layout.BF16 and api.initOutputFlag == 1 and plan.zero_output


# --- build and example --------------------------------------------------------------------------
def test_kernel_build_without_cann_prints_one_line_and_reports_why(tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location(
        "pypto_ascendc_build", KERNEL_SOURCES / "build.py"
    )
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)  # by path, as setup.py does: no pypto import needed
    for variable in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "SOC_VERSION"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(build, "STANDARD_TOOLKIT_ROOTS", (str(tmp_path / "no-cann"),))
    ok, message = build.build_kernel_library(tmp_path / "out")
    lines = capsys.readouterr().err.splitlines()
    assert not ok and "no CANN toolkit" in message
    assert lines == [f"[pypto] NPU kernel skipped: {message}"]
    assert not (tmp_path / "out").exists()


# A TEST DOUBLE of CANN's AscendC CMake module: ascendc_library builds a host library that exports
# the launch symbol, and marks it when the production flag ASCENDC_DUMP=0 reached the sources.
FAKE_ASCENDC_CMAKE = """
function(ascendc_library target kind)
  set(stub ${CMAKE_BINARY_DIR}/${target}_stub.c)
  file(WRITE ${stub} "unsigned aclrtlaunch_${target}(void) { return 0; }\\n"
                     "#if defined(ASCENDC_DUMP) && ASCENDC_DUMP == 0\\n"
                     "int built_without_dump;\\n#endif\\n")
  add_library(${target} ${kind} ${stub})
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
@pytest.mark.skipif(shutil.which("cmake") is None, reason="no cmake")
@pytest.mark.parametrize("layout", ["compiler", f"{platform.machine()}-linux"])
def test_kernel_build_runs_the_cmake_project_with_a_toolkit(layout, tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location(
        "pypto_ascendc_build", KERNEL_SOURCES / "build.py"
    )
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    # older toolkits keep the CMake module under compiler/, newer asc-devkit under <arch>-linux/
    module_dir = tmp_path / "cann" / layout / "tikcpp" / "ascendc_kernel_cmake"
    module_dir.mkdir(parents=True)
    (module_dir / "ascendc.cmake").write_text(FAKE_ASCENDC_CMAKE)
    lib64 = tmp_path / "cann" / "lib64"  # stand-ins of the runtime libraries the kernel must name
    lib64.mkdir()
    (tmp_path / "empty.c").write_text("int pypto_fake_runtime_symbol;\n")
    for name in ("ascendcl", "runtime"):
        _compile(
            [
                "-shared",
                "-fPIC",
                f"-Wl,-soname,lib{name}.so",
                "-o",
                str(lib64 / f"lib{name}.so"),
                str(tmp_path / "empty.c"),
            ]
        )
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "cann"))
    monkeypatch.delenv("SOC_VERSION", raising=False)

    assert build.build_kernel_library(tmp_path / "out", "Ascend310P3")[0] is False  # not A2/A3
    ok, message = build.build_kernel_library(tmp_path / "out", "Ascend910B3")
    lines = capsys.readouterr().err.splitlines()
    assert ok, message
    assert lines[-1] == f"[pypto] NPU kernel built: {message}" and len(lines) == 2
    library = ctypes.CDLL(str(tmp_path / "out" / "libpypto_conv_dx.so"))
    assert hasattr(library, "aclrtlaunch_pypto_conv_dx") and hasattr(library, "built_without_dump")
    if shutil.which("readelf"):  # the runtime libraries are NEEDED, not only INTERFACE
        dynamic = subprocess.run(
            ["readelf", "-d", str(tmp_path / "out" / "libpypto_conv_dx.so")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "[libascendcl.so]" in dynamic and "[libruntime.so]" in dynamic, dynamic


@pytest.mark.parametrize("with_fake_npu", [False, True])
def test_npu_check_example(fake_ascend, with_fake_npu, tmp_path):
    env = fake_ascend.env() if with_fake_npu else dict(clean_env(), PYPTO_NPU_DEV_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "npu_check.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=limit(300),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    if with_fake_npu:
        assert done.stdout.count("NPU and CPU agree") == 5, done.stdout
        assert "15 sub-problem(s), 15 launch(es)" in done.stdout, done.stdout
        assert "6 sub-problem(s), 6 launch(es)" in done.stdout, done.stdout
    else:
        assert "NPU path unavailable: no Ascend NPU device node" in done.stdout


# --- round three of the adversarial review ----------------------------------------------------
def test_a_huge_tile_ml1_is_clipped_to_the_image_not_truncated_in_the_launch_struct(fake_ascend):
    """tileML1 = Win * 2^32 is legal (a multiple of Win; the CPU clips it to Hin); the launch
    plan clips rows per task to Hin too, where it used to keep 2^32 and ctypes truncated it to
    0 in the uint32 struct fields (a device fault)."""
    case = _case(
        "huge ML1",
        [1, 16, 5, 32],
        [16, 16, 3, 3],
        [1, 16, 5, 32],
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        [32 << 32, 144, 16],
        [16, 16, 16],
        dtype="DT_FP16",
    )
    result = run_python(
        f"""
        call = make_call({case!r})
        dy, w = arrays({case!r}, True)
        npu = device.conv_backward_input_npu(call, dy, w)
        cpu = conv_backward_input_cpu(call, dy, w)
        from pypto._npu.plan import plan_launches
        rows = [p.launches.rows_per_task for p in plan_launches(call).pieces if p.runs]
        emit(dict(equal=bool(np.array_equal(npu.view(np.uint16), cpu.view(np.uint16))),
                  rows=rows, faults=fake_counter("kernel_faults")))
    """,
        fake_ascend.env(PYPTO_DEVICE="npu"),
    )
    assert result["equal"] and result["faults"] == 0, result
    assert result["rows"] and all(r <= 5 for r in result["rows"]), result


def test_launch_struct_fields_refuse_values_that_do_not_fit():
    """ctypes keeps only the low bits of an int too wide for its field: filled() refuses."""
    from pypto._npu.launch_struct import ConvDxLaunch, filled

    assert filled(ConvDxLaunch, rowsPerTask=(1 << 32) - 1).rowsPerTask == (1 << 32) - 1
    for bad in (1 << 32, -1):
        with pytest.raises(pypto.PyptoError, match="rowsPerTask"):
            filled(ConvDxLaunch, rowsPerTask=bad)


def test_copy_in_passes_the_buffers_size_as_dest_max():
    """aclrtMemcpy's destMax is the device buffer's size, not the source's, so the runtime's own
    bound holds; a source larger than the buffer is refused before any copy."""
    from pypto._npu.runtime import Session

    calls = []

    class FakeAcl:
        def aclrtMalloc(self, pointer, nbytes, policy):
            pointer._obj.value = 4096
            return 0

        def aclrtMemcpy(self, dst, dest_max, src, count, kind):
            calls.append((dest_max, count))
            return 0

        def check(self, ret, name):
            assert ret == 0

    class FakeRuntime:
        acl, kernel, stream = FakeAcl(), None, None

    session = Session(FakeRuntime())
    buffer = session.alloc(64)
    session.copy_in(buffer, np.zeros(8, np.uint16))
    assert calls == [(64, 16)]
    with pytest.raises(pypto.PyptoError, match="do not fit"):
        session.copy_in(buffer, np.zeros(40, np.uint16))
    assert len(calls) == 1


# --- trust: the self-check that auto needs (issue 24) -------------------------------------------
_SELF_CHECK_SCRIPT = """
    import warnings
    warnings.simplefilter("always")
    call = make_call({case!r})
    dy, w = arrays({case!r}, exact=True)
    before = fake_counter("kernel_runs")
    with warnings.catch_warnings(record=True) as caught:
        choice = device.select_backend(call)
        runs_for_choice = fake_counter("kernel_runs") - before
        verdict = device.known_self_check()
        out = pypto.conv_backward_input(pypto.from_numpy(dy), {case[input_size]!r},
                                        pypto.from_numpy(w), pypto.DT_FP16, {case[strides]!r},
                                        {case[paddings]!r}, {case[dilations]!r}).numpy()
    emit(dict(choice=choice, runs_for_choice=runs_for_choice, after=extra_checks(),
              passed=verdict and verdict["passed"], source=verdict and verdict["source"],
              summary=verdict and verdict["summary"], reason=device.unavailable_reason(),
              equal=bool(np.array_equal(out.view(np.uint16),
                                        conv_backward_input_cpu(call, dy, w).view(np.uint16))),
              warnings=[str(c.message) for c in caught]))
"""


def _self_check_run(fake_ascend, cache, after="None", **env):
    """The spec case through the op in auto mode (the cache in ``cache``); ``after``: code of
    an expression evaluated after that call, its value in the result's "after"."""
    code = f"def extra_checks():\n    return {after}\n" + textwrap.dedent(
        _SELF_CHECK_SCRIPT.format(case=SPEC_CASE)
    )
    return run_python(code, fake_ascend.env(PYPTO_CACHE_DIR=str(cache), **env))


def test_auto_uses_the_npu_after_its_self_check_passed_and_the_next_process_reuses_it(
    fake_ascend, tmp_path
):
    first = _self_check_run(fake_ascend, tmp_path)
    assert first["choice"] == "npu" and first["passed"] and first["equal"], first
    assert first["source"] == "run in this process" and first["runs_for_choice"] > 10, first
    assert first["reason"] is None and first["warnings"] == []
    stored = json.loads((tmp_path / "npu-self-check.json").read_text())
    (record,) = stored.values()
    assert record["passed"] and len(record["problems"]) >= 10
    assert {"kernel_sha256", "acl_sha256", "soc", "pypto"} <= set(record["key"])
    second = _self_check_run(fake_ascend, tmp_path)
    assert second["choice"] == "npu" and second["runs_for_choice"] == 0, second
    assert second["source"].startswith("cached in ") and second["equal"]


def test_a_device_error_mid_run_gives_the_cpu_result_and_auto_stays_on_the_cpu(
    fake_ascend, tmp_path
):
    """An AI Core exception in a call (after the self-check passed): the call's result is the
    CPU's, with a RuntimeWarning naming the error; auto then stays on the CPU, and a forced NPU
    says why it is disabled."""
    result = run_python(
        f"""
        import warnings
        call = make_call({SPEC_CASE!r})
        dy, w = arrays({SPEC_CASE!r}, exact=True)
        op = lambda: pypto.conv_backward_input(pypto.from_numpy(dy), [1, 16, 5, 32],
                                               pypto.from_numpy(w), pypto.DT_FP16, [1, 1],
                                               [1, 1, 1, 1], [1, 1]).numpy()
        assert device.select_backend(call) == "npu"
        runs = fake_counter("kernel_runs")
        os.environ["FAKE_ACL_FAIL_SYNC"] = "1"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = op()
        del os.environ["FAKE_ACL_FAIL_SYNC"]
        tried_npu = fake_counter("kernel_runs") - runs
        expected = conv_backward_input_cpu(call, dy, w)
        runs = fake_counter("kernel_runs")
        again = op()
        device.set_device("npu")
        try:
            op()
            forced = None
        except device.NpuUnavailableError as exc:
            forced = str(exc)
        emit(dict(equal=bool(np.array_equal(out.view(np.uint16), expected.view(np.uint16))),
                  again_equal=bool(np.array_equal(again, expected)), tried_npu=tried_npu,
                  runs_after=fake_counter("kernel_runs") - runs,
                  warnings=[str(c.message) for c in caught], auto=(device.set_device("auto"),
                  device.select_backend(call))[1], reason=device.unavailable_reason(),
                  forced=forced, live=fake_counter("live_allocations")))
    """,
        fake_ascend.env(PYPTO_CACHE_DIR=str(tmp_path)),
    )
    assert result["equal"] and result["again_equal"], result
    (warning,) = result["warnings"]
    assert "AI Core exception" in warning and "computed on the CPU" in warning
    assert result["auto"] == "cpu" and result["runs_after"] == 0 and result["live"] == 0
    assert "disabled for this process after a device error" in result["reason"]
    assert "AI Core exception" in result["forced"]


def test_the_callers_acl_context_is_left_as_it_was(fake_ascend, tmp_path):
    """pypto's ACL calls, bring-up included, run on its own device thread: a thread that has
    its own context current (as torch_npu's threads do) keeps it through pypto's bring-up and
    calls, in auto and in npu mode."""
    result = run_python(
        f"""
        lib = ctypes.CDLL(os.path.join(os.environ["ASCEND_HOME_PATH"], "lib64", "libascendcl.so"),
                          mode=ctypes.RTLD_GLOBAL)
        assert lib.aclInit(None) == 0
        mine, current = ctypes.c_void_p(), ctypes.c_void_p()
        assert lib.aclrtCreateContext(ctypes.byref(mine), 0) == 0  # current in this thread
        call = make_call({SPEC_CASE!r})
        dy, w = arrays({SPEC_CASE!r}, exact=True)
        seen = []
        for mode in ("auto", "npu"):
            device.set_device(mode)
            assert device.select_backend(call) == "npu"
            pypto.conv_backward_input(pypto.from_numpy(dy), [1, 16, 5, 32], pypto.from_numpy(w),
                                      pypto.DT_FP16, [1, 1], [1, 1, 1, 1], [1, 1])
            assert lib.aclrtGetCurrentContext(ctypes.byref(current)) == 0
            seen.append(current.value == mine.value)
        emit(dict(seen=seen, runs=fake_counter("kernel_runs")))
    """,
        fake_ascend.env(PYPTO_CACHE_DIR=str(tmp_path)),
    )
    assert result["seen"] == [True, True] and result["runs"] > 10, result


def test_selfcheck_and_info_commands(fake_ascend, tmp_path):
    env = fake_ascend.env(PYPTO_CACHE_DIR=str(tmp_path))
    pypto_cli = [sys.executable, "-m", "pypto"]

    def cli(*args):
        return subprocess.run(
            pypto_cli + list(args),
            capture_output=True,
            text=True,
            env=env,
            timeout=limit(300),
            cwd=str(ROOT / "tests"),
        )

    first = cli("selfcheck")
    assert first.returncode == 0, first.stderr
    assert "run in this process" in first.stdout and "verdict: PASS" in first.stdout
    assert first.stdout.count("  pass  ") >= 10 and "7x7 stem" in first.stdout
    info = cli("info")
    assert "npu: available" in info.stdout and "npu self-check: passed" in info.stdout
    assert "cached in" in info.stdout
    again = cli("selfcheck", "--again")
    assert again.returncode == 0 and "run in this process" in again.stdout
    missing = subprocess.run(
        pypto_cli + ["selfcheck"],
        capture_output=True,
        text=True,
        env=dict(clean_env(), PYPTO_NPU_DEV_DIR=str(tmp_path)),
        timeout=limit(300),
        cwd=str(ROOT / "tests"),
    )
    assert missing.returncode == 2 and "no self-check: the NPU cannot run here" in missing.stderr


def test_a_bad_verdict_cache_is_no_verdict_and_the_check_runs_again(fake_ascend, tmp_path):
    """Issue 42 #4: a record lacking or mistyping a field that info, selfcheck and auto read,
    or a FIFO where the cache file should be, is no verdict: the check runs again (no
    KeyError, no hang) and its full record replaces the bad one."""
    cache = tmp_path / "npu-self-check.json"
    _self_check_run(fake_ascend, tmp_path)  # a real verdict, cached
    (key,) = json.loads(cache.read_text())
    for record in (
        {"passed": False},
        {"passed": True},
        {"passed": True, "problems": 5, "kernel_verdict": True, "checked_at": "x", "summary": ""},
        {"passed": True, "problems": [], "kernel_verdict": True, "checked_at": 1, "summary": ""},
        ["passed"],
    ):
        cache.write_text(json.dumps({key: record}))
        run = _self_check_run(fake_ascend, tmp_path, after="device.is_available()")
        assert run["choice"] == "npu" and run["after"] is True, (record, run)
        assert run["source"] == "run in this process" and run["runs_for_choice"] > 10, run
        (stored,) = json.loads(cache.read_text()).values()
        assert stored["passed"] and len(stored["problems"]) >= 10
    cache.unlink()
    os.mkfifo(cache)
    run = _self_check_run(fake_ascend, tmp_path)  # run_python's timeout catches a hang
    assert run["choice"] == "npu" and run["source"] == "run in this process", run
    assert cache.is_file() and not cache.is_fifo()  # the verdict replaced the FIFO


def test_the_verdict_cache_follows_no_link_planted_in_its_folder(fake_ascend, tmp_path):
    """Issue 42 #5: a link at the temporary name a predictable writer would use (a shared
    cache folder) is not followed; the cache file is a regular file of its own."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    cache = tmp_path / "cache"
    cache.mkdir()
    code = f"""
        os.symlink({str(victim)!r}, os.path.join({str(cache)!r},
                   f".npu-self-check.json.{{os.getpid()}}.tmp"))
        emit(device.self_check(again=True)["passed"])
    """
    assert run_python(code, fake_ascend.env(PYPTO_CACHE_DIR=str(cache))) is True
    assert victim.read_text() == "precious"
    stored = cache / "npu-self-check.json"
    assert stored.is_file() and not stored.is_symlink()
    assert json.loads(stored.read_text())


@pytest.mark.parametrize(
    "knob, failing",
    [
        (dict(FAKE_KERNEL_WRONG_KH="7"), ["7x7 stem, stride 2 (bf16)"]),
        (
            dict(FAKE_KERNEL_SATURATE="1"),
            ["Inf and NaN in dy (fp16)", "Inf and NaN in dy (bf16)", "fp16 overflow (fp16)"],
        ),
    ],
)
def test_a_kernel_wrong_on_a_self_check_problem_is_never_used_by_auto(
    fake_ascend, tmp_path, knob, failing
):
    """A kernel wrong on one problem (the fake adds 1 wherever the kernel is 7 high), or one
    whose move-out saturates (Inf -> 65504, NaN -> 0): auto computes on the CPU and says which
    problem failed and how; the failure is cached; npu still forces it, with a warning."""
    first = _self_check_run(fake_ascend, tmp_path, **knob)
    assert first["choice"] == "cpu" and first["passed"] is False and first["equal"], first
    assert "failed its self-check" in first["reason"] and failing[0] in first["reason"]
    assert "elements differ from the CPU's" in first["reason"]
    (record,) = json.loads((tmp_path / "npu-self-check.json").read_text()).values()
    assert sorted(p["problem"] for p in record["problems"] if not p["passed"]) == sorted(failing)
    forced = _self_check_run(fake_ascend, tmp_path, PYPTO_DEVICE="npu", **knob)
    assert forced["choice"] == "npu" and forced["runs_for_choice"] == 0, forced
    assert len(forced["warnings"]) == 1 and "failed its self-check" in forced["warnings"][0]
