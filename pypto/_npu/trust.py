"""Whether ``auto`` may use the NPU: a self-check of this kernel library on this device.

The AscendC kernel is driven with tilings the official tiling never emits; nothing proves it
right on a given device, toolkit and build until it has run there. So ``auto`` sends calls to
the NPU only after a fixed set of problems, each computed on the NPU and on the CPU, agree:
bitwise, since every problem's data is small integers whose fp32 sums are exact (the two sum
in different orders, and exact sums make the order irrelevant), with Inf, NaN and fp16
overflow where they must appear. The verdict is cached on disk, keyed by the kernel library's
and AscendCL's bytes, the SoC, the visible device and pypto's version, so each combination is
checked once. ``PYPTO_DEVICE=npu`` forces the NPU whatever the verdict; a failed verdict is
then stated in a warning.
"""

import datetime
import os

import numpy as np

from .._core.fileio import file_sha256
from .._core.locks import ForkSafeLock
from .._core.verdicts import CACHE_DIR_ENV, VerdictCache
from .._version import __version__
from .errors import NpuError, NpuUnavailableError

__all__ = [
    "verdict",
    "known_verdict",
    "run_self_check",
    "cached_verdict",
    "cache_path",
    "SELF_CHECK_PROBLEMS",
    "CACHE_DIR_ENV",
]

SELF_CHECK_VERSION = 1  # bump when the problems change: older verdicts no longer count

# name, dtype, dy shape, weight shape, input size, strides, paddings, dilations, tiles (None:
# suggested; else L1 (M, K, N) and L0 (M, K, N)), data ("ints", or a non-finite pattern)
SELF_CHECK_PROBLEMS = (
    (
        "spec example",
        "fp16",
        [1, 16, 5, 32],
        [16, 16, 3, 3],
        [1, 16, 5, 32],
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        ((16, 144, 16), (16, 16, 16)),
        "ints",
    ),
    (
        "spec example",
        "bf16",
        [1, 16, 5, 32],
        [16, 16, 3, 3],
        [1, 16, 5, 32],
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        ((16, 144, 16), (16, 16, 16)),
        "ints",
    ),
    # stride 2: dx positions no tap reaches, so the kernel initialises its output
    (
        "stride 2",
        "fp16",
        [2, 20, 7, 9],
        [20, 13, 3, 3],
        [2, 13, 14, 18],
        [2, 2],
        [1, 1, 1, 1],
        [1, 1],
        ((18, 144, 16), (16, 48, 16)),
        "ints",
    ),
    (
        "dilation 2",
        "bf16",
        [1, 32, 10, 12],
        [32, 24, 3, 3],
        [1, 24, 10, 12],
        [1, 1],
        [2, 2, 2, 2],
        [2, 2],
        None,
        "ints",
    ),
    (
        "7x7 stem, stride 2",
        "bf16",
        [1, 64, 16, 16],
        [64, 3, 7, 7],
        [1, 3, 32, 32],
        [2, 2],
        [3, 3, 3, 3],
        [1, 1],
        None,
        "ints",
    ),
    # stride 9 x dilation 7 on a 9x9 kernel: no single launch holds it; stride and dilation
    # phases, each its own launches
    (
        "decomposed (stride and dilation phases)",
        "fp16",
        [1, 16, 4, 4],
        [16, 16, 9, 9],
        [1, 16, 80, 80],
        [9, 9],
        [4, 4, 4, 4],
        [7, 7],
        None,
        "ints",
    ),
    # one row per task: 2 images x 64 rows x 2 channel blocks, several times any AI core count
    (
        "many tasks",
        "fp16",
        [2, 16, 64, 64],
        [16, 32, 3, 3],
        [2, 32, 64, 64],
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        ((64, 144, 32), (64, 16, 16)),
        "ints",
    ),
    (
        "Inf and NaN in dy",
        "fp16",
        [1, 16, 5, 32],
        [16, 16, 3, 3],
        [1, 16, 5, 32],
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        ((16, 144, 16), (16, 16, 16)),
        "inf_nan_dy",
    ),
    (
        "Inf and NaN in dy",
        "bf16",
        [1, 16, 5, 32],
        [16, 16, 3, 3],
        [1, 16, 5, 32],
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        ((16, 144, 16), (16, 16, 16)),
        "inf_nan_dy",
    ),
    (
        "Inf in the weight",
        "fp16",
        [1, 16, 5, 32],
        [16, 16, 3, 3],
        [1, 16, 5, 32],
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        ((16, 144, 16), (16, 16, 16)),
        "inf_weight",
    ),
    # sums beyond 65504 must become Inf (a saturating move-out would give 65504)
    (
        "fp16 overflow",
        "fp16",
        [1, 16, 5, 32],
        [16, 16, 3, 3],
        [1, 16, 5, 32],
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
        ((16, 144, 16), (16, 16, 16)),
        "overflow",
    ),
)


def _arrays(problem, seed):
    """dy and w of one problem: small integers (exact fp32 sums), then its special values."""
    _, dtype, dy_shape, w_shape, *_, data = problem
    from .._dtypes import DataType, numpy_dtype

    np_dtype = numpy_dtype(DataType.DT_FP16 if dtype == "fp16" else DataType.DT_BF16)
    rng = np.random.default_rng(seed)
    dy = rng.integers(-4, 5, dy_shape).astype(np.float64)
    w = rng.integers(-4, 5, w_shape).astype(np.float64)
    if data == "inf_nan_dy":
        dy[0, 0, 1, 3], dy[0, 5, 2, 20], dy[0, 9, 4, 31] = np.inf, -np.inf, np.nan
    elif data == "inf_weight":
        w[3, 7, 1, 1], w[10, 2, 0, 2] = np.inf, -np.inf
    elif data == "overflow":  # 144 taps x 64 x 16: up to 147456 > 65504, exact in fp32
        dy = np.abs(dy) * 16
        w = np.abs(w) * 16
        dy[0, :, :2] = -dy[0, :, :2]  # both signs of overflow
    return dy.astype(np_dtype), w.astype(np_dtype)


def _call(problem):
    """The validated call of one self-check problem, under its own tiles."""
    from .._core import options as _config
    from .._core.rules import validate_conv_backward_input
    from .._core.suggest import suggest_convbp_input_tile_shapes
    from .._dtypes import DataType
    from ..pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info
    from ..tensor import Tensor

    _, dtype, dy_shape, w_shape, size, strides, pads, dils, tiles, _ = problem
    dt = DataType.DT_FP16 if dtype == "fp16" else DataType.DT_BF16
    if tiles is None:
        l1, l0 = suggest_convbp_input_tile_shapes(dy_shape, w_shape, size, dt, strides, pads, dils)
    else:
        l1, l0 = ConvBpTileL1Info(*tiles[0]), ConvBpTileL0Info(*tiles[1])
    with _config.options(convbp_tile_shapes=(l1, l0), vec_tile_shapes=[16, 16, 16, 16]):
        return validate_conv_backward_input(
            Tensor(dy_shape, dt), size, Tensor(w_shape, dt), dt, strides, pads, dils
        )


def _difference(npu, cpu):
    """None when the two agree bit for bit (NaN's payload aside), else what differs."""
    a, b = npu.view(np.uint16), cpu.view(np.uint16)
    nan_a, nan_b = np.isnan(npu.astype(np.float32)), np.isnan(cpu.astype(np.float32))
    differ = (a != b) & ~(nan_a & nan_b)
    if not differ.any():
        return None
    first = tuple(int(i) for i in np.argwhere(differ)[0])
    x, y = npu.astype(np.float64), cpu.astype(np.float64)
    with np.errstate(invalid="ignore"):
        finite = differ & np.isfinite(x) & np.isfinite(y)
        worst = float(np.abs(x - y)[finite].max()) if finite.any() else float("nan")
    return (
        f"{int(differ.sum())} of {differ.size} elements differ from the CPU's; first at "
        f"{list(first)}: NPU {x[first]!r}, CPU {y[first]!r}; largest finite difference "
        f"{worst:g}"
    )


def run_self_check(npu_compute, cpu_compute):
    """Each problem on the NPU and on the CPU (``npu_compute(call, dy, w)``,
    ``cpu_compute(call, dy, w)``; the NPU backend imports no CPU backend): a verdict dict."""

    results, planned = [], True
    for index, problem in enumerate(SELF_CHECK_PROBLEMS):
        name = f"{problem[0]} ({problem[1]})"
        call = _call(problem)
        dy, w = _arrays(problem, seed=index)
        expected = cpu_compute(call, dy, w)
        try:
            detail = _difference(npu_compute(call, dy, w), expected)
        except NpuUnavailableError as exc:  # no plan, or no NPU: not the kernel's verdict
            planned = False
            detail = f"the NPU could not run it: {exc.text}"
        except NpuError as exc:
            detail = f"the NPU call failed: {exc.text}"
        results.append({"problem": name, "passed": detail is None, "detail": detail})
    failed = [r for r in results if not r["passed"]]
    return {
        "passed": not failed,
        "problems": results,
        "kernel_verdict": planned,
        "checked_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "summary": (f"passed all {len(results)} problems")
        if not failed
        else f"failed {len(failed)} of {len(results)} problems; first: {failed[0]['problem']}: "
        f"{failed[0]['detail']}",
    }


# --- the cache --------------------------------------------------------------------------------
_CACHE = VerdictCache("npu-self-check.json", "NPU")


def cache_path():
    """Where verdicts are kept: ``npu-self-check.json`` in pypto's cache folder
    (``pypto._core.verdicts``)."""
    return _CACHE.path


def _key(runtime):
    """What a verdict holds for: this kernel build, this AscendCL (the CANN version), this SoC
    and device, this pypto and this set of problems."""
    return {
        "kernel_sha256": file_sha256(runtime.kernel_path),
        "acl_sha256": file_sha256(runtime.acl_path),
        "soc": runtime.soc,
        "visible_devices": os.environ.get("ASCEND_RT_VISIBLE_DEVICES", ""),
        "pypto": __version__,
        "self_check": SELF_CHECK_VERSION,
    }


def _is_text(value):
    return isinstance(value, str)


def _is_problem(value):
    return (
        isinstance(value, dict)
        and _is_text(value.get("problem"))
        and isinstance(value.get("passed"), bool)
        and (value.get("detail") is None or _is_text(value.get("detail")))
    )


# every field a verdict's readers use (device.unavailable_reason, `pypto info`, `pypto
# selfcheck`): a record lacking or mistyping one is no verdict, and the check runs again
_RECORD_FIELDS = {
    "passed": lambda v: isinstance(v, bool),
    "problems": lambda v: isinstance(v, list) and all(_is_problem(p) for p in v),
    "kernel_verdict": lambda v: v is True,  # only such verdicts are stored
    "checked_at": _is_text,
    "summary": _is_text,
}


def _is_record(record):
    return isinstance(record, dict) and all(
        name in record and ok(record[name]) for name, ok in _RECORD_FIELDS.items()
    )


def cached_verdict(runtime):
    """The stored verdict for this runtime's combination, or None (also for a record that
    lacks or mistypes a field: see ``_RECORD_FIELDS``)."""
    record = _CACHE.get(_key(runtime))
    return record if _is_record(record) else None


_lock = ForkSafeLock()
_verdicts = {}  # id(runtime) -> verdict, for this process


def known_verdict(runtime):
    """The verdict from this process or the cache, or None; runs nothing."""
    with _lock:
        known = _verdicts.get(id(runtime))
    if known is None:
        known = cached_verdict(runtime)
        if known is not None:
            known = dict(known, source="cached in " + str(cache_path()))
    return known


def verdict(runtime, npu_compute, cpu_compute, again=False):
    """This runtime's verdict: from this process, else the cache, else by running the check
    (and caching it). ``again``: run it even when a verdict is known."""
    with _lock:
        known = None if again else _verdicts.get(id(runtime))
        if known is None and not again:
            known = cached_verdict(runtime)
            if known is not None:
                known = dict(known, source="cached in " + str(cache_path()))
        if known is None:
            key = _key(runtime)
            known = dict(run_self_check(npu_compute, cpu_compute), key=key)
            if known["kernel_verdict"]:  # a problem that could not run says nothing lasting
                _CACHE.store(key, known)
            known = dict(known, source="run in this process")
        _verdicts[id(runtime)] = known
        return known
