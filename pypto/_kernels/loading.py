"""Which kernel build runs on this CPU: the feature table, the levels built and supported, and
the lazy, locked import of the one chosen.

Like NumPy's CPU dispatch, nothing built above the baseline runs before the CPU has been
checked: the feature table comes from ``features`` (baseline build), the built levels are found
without importing them, and only the level chosen, one the CPU has every feature for, is
imported, on first use. ``PYPTO_CPU_ISA`` names a level; one that this CPU or build lacks is a
PyptoRtError, raised before that level's code is loaded.
"""

import importlib
import importlib.util
import os
import platform

from .._core.locks import ForkSafeLock
from ..error import PyptoRtError
from . import levels

__all__ = [
    "CPU_FEATURES",
    "BUILT_LEVELS",
    "CPU_LEVELS",
    "ISA_LEVELS",
    "unavailable",
    "choose",
    "load_level",
    "chosen_kernel",
    "chosen_reason",
    "loaded_kernel",
]

ISA_LEVELS = levels.LEVEL_NAMES


def _import_features():
    try:
        from . import features
    except ImportError:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        raise ImportError(
            f"pypto's CPU kernel is not built in {here}: this looks like the source tree, "
            "imported because it is the current folder. Install with `pip install .` and run "
            "from another folder (or use the `pypto` command), or build in place with "
            "`pip install -e .`."
        ) from None
    return features.cpu_features()


CPU_FEATURES = _import_features()
# Built: the module file exists (find_spec locates it without running any of its code).
BUILT_LEVELS = tuple(
    level
    for level in ISA_LEVELS
    if importlib.util.find_spec(f"pypto._kernels.kernel.dgrad_{level}") is not None
)
CPU_LEVELS = tuple(
    level for level in ISA_LEVELS if not levels.missing_features(level, CPU_FEATURES)
)


def unavailable(level):
    """Why ``level`` cannot run here, or None when it can."""
    if level not in BUILT_LEVELS:
        return "not built in this installation"
    missing = levels.missing_features(level, CPU_FEATURES)
    if missing:
        return f"the CPU (or OS) lacks {', '.join(missing)}"
    return None


def choose(requested):
    """(level, why it was chosen) for ``PYPTO_CPU_ISA``'s value (empty: the best that runs)."""
    if not requested:
        runs = [lv for lv in ISA_LEVELS if unavailable(lv) is None]
        level = [lv for lv in runs if not levels.passed_over(lv, CPU_FEATURES)][-1]
        here = [lv.name for lv in levels.levels_for(platform.machine())]
        above = [lv for lv in here[here.index(level) + 1 :] if lv not in runs][:1]
        return level, "the best level built and supported by this CPU" + "".join(
            f"; {lv} runs but is passed over: {levels.passed_over(lv, CPU_FEATURES)} "
            f"(PYPTO_CPU_ISA={lv} selects it)"
            for lv in runs
            if levels.passed_over(lv, CPU_FEATURES)
        ) + (f"; {above[0]}: {unavailable(above[0])}" if above else "")
    if requested not in ISA_LEVELS:
        raise PyptoRtError(ValueError(f"PYPTO_CPU_ISA={requested!r}: expected one of {ISA_LEVELS}"))
    why_not = unavailable(requested)
    if why_not:
        raise PyptoRtError(
            RuntimeError(
                f"PYPTO_CPU_ISA={requested!r} cannot be used here: {why_not}; levels built and "
                f"supported by this CPU are {[lv for lv in ISA_LEVELS if unavailable(lv) is None]}"
            )
        )
    return requested, f"PYPTO_CPU_ISA={requested}"


def load_level(level):
    """The kernel module of ``level``, imported only if this CPU runs it (PyptoRtError if not)."""
    why_not = unavailable(level) if level in ISA_LEVELS else "unknown level"
    if why_not:
        raise PyptoRtError(RuntimeError(f"ISA level {level!r} cannot be loaded: {why_not}"))
    return importlib.import_module(f"pypto._kernels.kernel.dgrad_{level}")


# a fork waits for the kernel's import in another thread (an import holds CPython's lock of
# the module, which no thread of the child would release)
_lock = ForkSafeLock(held_across_fork=True)
_chosen = None  # (module, reason), set on first use


def chosen_kernel():
    global _chosen
    if _chosen is None:
        with _lock:
            if _chosen is None:
                level, reason = choose(os.environ.get("PYPTO_CPU_ISA", "").strip().lower())
                _chosen = (load_level(level), reason)
    return _chosen[0]


def chosen_reason():
    """Why the level in use was chosen (loading it first if no call has yet)."""
    chosen_kernel()
    return _chosen[1]


def loaded_kernel():
    """The kernel module in use, or None when nothing has loaded it yet."""
    return None if _chosen is None else _chosen[0]
