"""Whether bf16 calls in sum_order "tile" may run on the AMX tile unit in this process.

Three conditions, checked once per process at the first call that would use it (never at
import, never by ``pypto info``):

1. the kernel level has the tile unit (``avx512_amx``: CPUID and XCR0 said so);
2. Linux granted this process tile data (``arch_prctl(ARCH_REQ_XCOMP_PERM)``, read back);
   granting it enlarges every thread's signal frame, which is why pypto asks only then;
3. the self-check passed: a child process runs a fixed set of problems on the tile unit and in
   the emulation of the same order, and their bits must agree (NaN where NaN). A child, so that
   a tile unit that faults ends it and not the user's process. Its verdict is cached per CPU
   model, microcode, kernel build, pypto version and problem set (``amx-self-check.json`` in
   pypto's cache folder), so each host runs it once.

Otherwise the order runs emulated, with the same bits, and one warning says why. Either way
the bits are those of the order; only the speed differs.
"""

import datetime
import functools
import json
import os
import subprocess
import sys
import warnings

from .._core.fileio import file_sha256
from .._core.locks import ForkSafeLock
from .._core.verdicts import VerdictCache
from .._version import __version__

__all__ = ["tile_unit_usable", "tile_unit_state", "cache_path", "run_self_check"]

SELF_CHECK_VERSION = 2  # bump when the problems change
CHILD_SECONDS = 120

# (name, dy shape, w shape, dx H and W, attrs (sh, sw, pt, pl, dh, dw), data)
SELF_CHECK_PROBLEMS = (
    ("odd channels, 3x3", (2, 45, 6, 7), (45, 33, 3, 3), (6, 7), (1, 1, 1, 1, 1, 1), "wide"),
    ("one co block, 1x1", (1, 32, 5, 20), (32, 16, 1, 1), (5, 20), (1, 1, 0, 0, 1, 1), "wide"),
    (
        "1x1, odd Cout, Cin 16 + 4",
        (1, 45, 3, 20),
        (45, 20, 1, 1),
        (3, 20),
        (1, 1, 0, 0, 1, 1),
        "wide",
    ),
    ("a stem: Cin 3, 7x7/2", (2, 40, 9, 20), (40, 3, 7, 7), (18, 40), (2, 2, 3, 3, 1, 1), "wide"),
    ("stride 2", (2, 70, 4, 5), (70, 40, 3, 3), (8, 9), (2, 2, 1, 1, 1, 1), "wide"),
    (
        "stride 2x3, dilation 2x1",
        (1, 17, 5, 6),
        (17, 8, 2, 3),
        (11, 17),
        (2, 3, 0, 1, 2, 1),
        "wide",
    ),
    ("many co blocks", (1, 200, 6, 6), (200, 24, 3, 3), (6, 6), (1, 1, 1, 1, 1, 1), "cancel"),
    ("near overflow", (1, 64, 4, 16), (64, 16, 3, 3), (4, 16), (1, 1, 1, 1, 1, 1), "huge"),
    (
        "Inf, NaN, signed zeros",
        (1, 40, 5, 9),
        (40, 20, 3, 3),
        (5, 9),
        (1, 1, 1, 1, 1, 1),
        "special",
    ),
    # data whose bits depend on the order within a block (the others' rarely do: a unit
    # summing a block in one chain differed in 1 of their 19,936 elements, in 80-83% of these)
    ("order: 3x3, odd Cout", (2, 45, 6, 7), (45, 33, 3, 3), (6, 7), (1, 1, 1, 1, 1, 1), "order"),
    ("order: stride 2", (2, 70, 4, 5), (70, 40, 3, 3), (8, 9), (2, 2, 1, 1, 1, 1), "order"),
)


def _problem_arrays(dy_shape, w_shape, data, seed):
    """bf16 bit patterns (uint16) of dy and w: normal values only (the tile unit runs only
    where no subnormal can occur), exponents spread (by 20 either way; 2 for "order"), with
    the problem's special values. "order": in each co block channel 0's dy is 2^20 and
    channel 1's its negative, over equal weights: E and O each carry a product of 2^20 that
    their sum cancels, so the small products' bits left in them depend on the order."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def values(shape, spread):
        sign = rng.integers(0, 2, shape, dtype=np.uint16) << 15
        exponent = (127 + rng.integers(-spread, spread + 1, shape)).astype(np.uint16) << 7
        return sign | exponent | rng.integers(0, 128, shape, dtype=np.uint16)

    spread = 2 if data in ("close", "order") else 20
    dy, w = values(dy_shape, spread), values(w_shape, spread)
    if data == "cancel":  # neighbours that cancel: sums far below their terms
        dy[:, 1::2] = dy[:, 0::2][:, : dy[:, 1::2].shape[1]] ^ 0x8000
    elif data == "huge":  # products near 2^126: some chains overflow to Inf, most do not
        dy = (dy & 0x807F) | np.uint16((127 + 60) << 7)
        w = (w & 0x807F) | ((127 + 62 + rng.integers(-6, 2, w.shape)) << 7).astype(np.uint16)
    elif data == "special":
        dy.reshape(-1)[3::7] = 0x8000  # -0
        dy[0, 0, 0, 0] = 0x7F80  # +Inf, -Inf and NaN, each reaching a few outputs
        dy[0, 1, -1, -1] = 0xFF80
        dy[0, 2, 2, 4] = 0x7FC1
        w.reshape(-1)[2::5] = 0x8000
        w.reshape(-1)[4::9] = 0
    dy.reshape(-1)[::13] = 0
    if data == "order":  # per co block, channel 0's products (2^20) cancel channel 1's
        for c in range(0, dy_shape[1] - 1, 32):
            dy[:, c] = (dy[:, c] & 0x807F) | np.uint16((127 + 20) << 7)
            dy[:, c + 1] = dy[:, c] ^ 0x8000
            w[c + 1] = w[c]
    return dy, w


def run_self_check(kernel):
    """The check itself, in this process (the child's work): each problem on the tile unit and
    emulated; returns a JSON-able record."""
    import numpy as np

    problems = []
    for seed, (name, dy_shape, w_shape, hw, attrs, data) in enumerate(SELF_CHECK_PROBLEMS):
        dy, w = _problem_arrays(dy_shape, w_shape, data, seed)
        dx_shape = (dy_shape[0], w_shape[1]) + hw
        tiles, emulated = np.empty(dx_shape, np.uint16), np.empty(dx_shape, np.uint16)
        path = kernel.dgrad_tile(dy, w, tiles, attrs, 2, True, 0)
        kernel.dgrad_tile(dy, w, emulated, attrs, 1, False, 0)
        nan_t = (tiles & 0x7FFF) > 0x7F80
        nan_e = (emulated & 0x7FFF) > 0x7F80
        differ = int(np.count_nonzero((tiles != emulated) & ~(nan_t & nan_e)))
        detail = None
        if path != "tile+amx":
            detail = f"the tile unit did not run ({path})"
        elif differ:
            detail = f"{differ} of {tiles.size} elements differ from the emulation"
        problems.append({"problem": name, "passed": detail is None, "detail": detail})
    passed = all(p["passed"] for p in problems)
    return {
        "passed": passed,
        "problems": problems,
        "summary": f"{sum(p['passed'] for p in problems)} of {len(problems)} problems bitwise "
        "equal to the emulation",
        "checked_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


_CACHE = VerdictCache("amx-self-check.json", "AMX")


def cache_path():
    """``amx-self-check.json`` in pypto's cache folder (``pypto._core.verdicts``)."""
    return _CACHE.path


def _cpu_identity():
    """The first processor's model, stepping and microcode, as /proc/cpuinfo gives them."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                name, _, value = line.partition(":")
                name = name.strip()
                if name in (
                    "vendor_id",
                    "cpu family",
                    "model",
                    "model name",
                    "stepping",
                    "microcode",
                ):
                    fields[name] = value.strip()
    except OSError:
        pass
    return fields


@functools.cache
def _build_digest(path):
    return file_sha256(path)  # once a process: pypto info and every first call ask


def _key(kernel):
    return {
        "cpu": _cpu_identity(),
        "kernel_sha256": _build_digest(kernel.__file__),
        "pypto": __version__,
        "self_check": SELF_CHECK_VERSION,
    }


def _is_record(record):
    return (
        isinstance(record, dict)
        and isinstance(record.get("passed"), bool)
        and isinstance(record.get("summary"), str)
        and isinstance(record.get("problems"), list)
    )


# The child imports this very package, not whatever ``pypto`` its working folder holds (a
# source checkout beside an installed wheel would otherwise answer for it).
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CHILD_CODE = (
    "import sys; sys.path.insert(0, {root!r}); "
    "from pypto._kernels.amx import _child_main; sys.exit(_child_main())"
)


def _run_child():
    """The self-check's record from a child process, or a failed one saying how it ended."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD_CODE.format(root=_PACKAGE_ROOT)],
            capture_output=True,
            text=True,
            timeout=CHILD_SECONDS,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"passed": False, "problems": [], "summary": f"the child did not finish: {exc}"}
    if done.returncode != 0:
        how = (
            f"died of signal {-done.returncode}"
            if done.returncode < 0
            else f"exited with {done.returncode}"
        )
        tail = done.stderr.strip().splitlines()[-1:] or [""]
        return {"passed": False, "problems": [], "summary": f"the child {how} {tail[0]}".strip()}
    try:
        record = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        record = None
    if not _is_record(record):
        return {"passed": False, "problems": [], "summary": "the child printed no verdict"}
    return record


_lock = ForkSafeLock()
_state = None  # (usable, why), once decided in this process


def tile_unit_state():
    """(usable, why) as decided in this process, or None when no call has asked yet."""
    return _state


def cached_verdict(kernel):
    """The verdict cached for this host and build, or None; asks the OS nothing and runs no
    check (``pypto info`` before any call)."""
    if not getattr(kernel, "HAS_AMX", False):
        return None
    record = _CACHE.get(_key(kernel))
    return record if _is_record(record) else None


def tile_unit_usable(kernel):
    """True when ``kernel``'s tile unit may serve this process (deciding it at the first
    call, see the module docstring); False with one RuntimeWarning when it may not."""
    global _state
    if _state is not None:
        return _state[0]
    with _lock:
        if _state is None:
            _state = _decide(kernel)
            if not _state[0] and getattr(kernel, "HAS_AMX", False):
                warnings.warn(
                    f"pypto: sum_order 'tile' runs emulated (same bits, slower): {_state[1]}",
                    RuntimeWarning,
                    stacklevel=4,
                )
    return _state[0]


def _decide(kernel):
    from . import features

    if not getattr(kernel, "HAS_AMX", False):
        return False, f"the {kernel.ISA} level has no tile unit"
    refused = features.request_amx_permission()
    if refused:
        return False, f"the OS refused AMX tile data to this process ({os.strerror(refused)})"
    key = _key(kernel)
    record = _CACHE.get(key)
    source = f"cached in {cache_path()}"
    if not _is_record(record):
        record = _run_child()
        source = "run in a child process"
        if record.get("problems"):  # a check that ran says something lasting
            _CACHE.store(key, dict(record, key=key))
    why = f"self-check {'passed' if record['passed'] else 'FAILED'}: {record['summary']} ({source})"
    return record["passed"], why


def _child_main():
    from . import features
    from .loading import load_level

    refused = features.request_amx_permission()
    if refused:
        print(f"the OS refused AMX tile data ({os.strerror(refused)})", file=sys.stderr)
        return 3
    print(json.dumps(run_self_check(load_level("avx512_amx"))))
    return 0
