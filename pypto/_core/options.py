"""Scoped configuration: tile shapes and thread count, with upstream's scope rules.

A value set at top level lives in the process-wide *global* scope, shared by every thread. A
value set inside ``pypto.function(...)``, a jit call or ``pypto.options(...)`` lives in that
scope, which belongs to the calling thread, and disappears when the scope exits. Reads walk
from the innermost scope out to the global scope, then to the defaults.
"""

import contextlib
import contextvars
import copy
import functools
import inspect
import os

from ..error import FeError, argument_errors_are_pypto_errors
from ..pypto_impl import ConvBpTile, ConvBpTileL0Info, ConvBpTileL1Info
from .cpus import default_threads
from .environ import getenv
from .locks import ForkSafeLock
from .values import as_int

__all__ = [
    "set_convbp_input_tile_shapes",
    "get_convbp_input_tile_shapes",
    "set_vec_tile_shapes",
    "get_vec_tile_shapes",
    "set_num_threads",
    "get_num_threads",
    "get_memory_limit",
    "get_sum_order",
    "SUM_ORDERS",
    "options",
    "set_options",
    "get_options",
    "reset_options",
]

_DEFAULTS = {
    "convbp_tile_shapes": ConvBpTile(),
    "vec_tile_shapes": [],
    "num_threads": None,
    "memory_limit": None,
    "sum_order": None,
}

# The bf16 summation orders (README, "Numerics"): "tile" in the order of AMX's TDPBF16PS
# (pypto/_kernels/kernel/pypto_tile.h), the default: the same bits on every CPU, computed
# natively by the AMX tile unit; "sequential" sums k = (co, kh, kw) one FMA at a time (0.1's
# only order, kept to re-make its goldens). fp16 always sums sequentially.
SUM_ORDERS = ("sequential", "tile")
DEFAULT_BF16_SUM_ORDER = "tile"

_MISSING = object()
_global_scope = {}
_global_lock = ForkSafeLock()
# The open scopes, innermost last: a tuple of (token, values) pairs, replaced whole (never
# changed in place). A context variable, so each thread and each asyncio task has its own
# (a task starts with the scopes open where it was created, and what it opens or sets stays
# its own).
_scopes = contextvars.ContextVar("pypto_config_scopes", default=())


def _get(key):
    for _, scope in reversed(_scopes.get()):
        if key in scope:
            return scope[key]
    # A dict lookup is atomic; writers replace values whole, so readers need no lock.
    value = _global_scope.get(key, _MISSING)
    return _DEFAULTS[key] if value is _MISSING else value


def _set(key, value):
    scopes = _scopes.get()
    if scopes:
        token, scope = scopes[-1]
        _scopes.set(scopes[:-1] + ((token, {**scope, key: value}),))
    else:
        with _global_lock:
            _global_scope[key] = value


def _open_scope(values=None):
    """Open a scope in this context (thread, asyncio task); its token closes it.

    ``values``: an ``options`` object's, checked and copied when it was made; the scope takes
    them as they are (checking and copying them again per scope cost 10 us)."""
    token = object()
    _scopes.set(_scopes.get() + ((token, dict(values or {})),))
    return token


def _close_scope(token):
    """Close one scope, and only that one: scopes opened after it in this context stay open
    (an exit out of order, as generators can make, must not close another's scope)."""
    _scopes.set(tuple(item for item in _scopes.get() if item[0] is not token))


@contextlib.contextmanager
def _scope(values=None):
    """Open a configuration scope (``values``: as _open_scope takes them); values set inside
    vanish when it exits."""
    token = _open_scope(values)
    try:
        yield
    finally:
        _close_scope(token)


def _normalize(key, value):
    """Check one option's type and return the copy that is stored."""
    if key == "convbp_tile_shapes":
        if hasattr(value, "impl"):  # pypto.config.ConvBpTile wraps the record
            value = value.impl()
        if isinstance(value, ConvBpTile):
            value = (value.tileL1Info, value.tileL0Info)
        if not (isinstance(value, (tuple, list)) and len(value) == 2):
            raise FeError(
                TypeError(
                    "convbp_tile_shapes must be a ConvBpTile or a "
                    f"(ConvBpTileL1Info, ConvBpTileL0Info) pair, but got {value!r}"
                )
            )
        l1, l0 = value
        if not isinstance(l1, ConvBpTileL1Info):
            raise FeError(
                TypeError(
                    "Argument 'tile_l1_info' must be of type ConvBpTileL1Info, "
                    f"but got {type(l1).__name__}."
                )
            )
        if not isinstance(l0, ConvBpTileL0Info):
            raise FeError(
                TypeError(
                    "Argument 'tile_l0_info' must be of type ConvBpTileL0Info, "
                    f"but got {type(l0).__name__}."
                )
            )
        # Stored by value, as upstream's C++ config does: later edits of the caller's records
        # do not change what was set.
        return ConvBpTile(copy.copy(l1), copy.copy(l0))
    if key == "vec_tile_shapes":
        try:
            values = list(value)
        except TypeError:
            raise FeError(
                TypeError(
                    f"vec_tile_shapes must be a list of ints, but got {value!r} "
                    f"of type {type(value).__name__}."
                )
            ) from None
        shapes = [as_int(v) for v in values]
        if None in shapes:
            v = values[shapes.index(None)]
            raise FeError(
                TypeError(
                    f"vec_tile_shapes must be ints, but got {v!r} of type {type(v).__name__}."
                )
            )
        return shapes
    if key == "num_threads":
        if value is None:
            return None
        count = as_int(value)
        if count is None:
            raise FeError(
                TypeError(
                    f"num_threads must be None or an int, but got {value!r} of "
                    f"type {type(value).__name__}."
                )
            )
        if not 1 <= count <= MAX_THREADS:
            raise FeError(
                ValueError(
                    f"num_threads must be None or an int in [1, {MAX_THREADS}], but got {count}."
                )
            )
        return count
    if key == "memory_limit":
        if value is None:
            return None
        return _parse_bytes(value, "memory_limit")
    if key == "sum_order":
        return None if value is None else _sum_order(value, "sum_order")
    raise FeError(KeyError(f"unknown option {key!r}; known options: {sorted(_DEFAULTS)}"))


def _sum_order(value, name):
    if isinstance(value, str) and value.strip().lower() in SUM_ORDERS:
        return value.strip().lower()
    raise FeError(
        ValueError(f"{name} must be one of {', '.join(map(repr, SUM_ORDERS))}, but got {value!r}.")
    )


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _parse_bytes(value, name):
    """Bytes from an int or a string like "8G" / "512M" (binary units)."""
    if isinstance(value, str):
        text = value.strip().upper().removesuffix("B").removesuffix("I")
        unit = text[-1:] if text[-1:] in _UNITS else ""
        try:
            value = int(float(text[: len(text) - len(unit)]) * _UNITS[unit])
        except (ValueError, OverflowError):  # not a number; or inf
            raise FeError(
                ValueError(
                    f"{name}: cannot read {value!r} as a size (e.g. 8589934592, '8G', '512M')"
                )
            ) from None
    count = as_int(value)  # ints and NumPy integers, not bools
    if count is None or count < 1:
        shown = value if count is None else count
        raise FeError(ValueError(f"{name} must be a positive number of bytes, but got {shown!r}."))
    return count


@argument_errors_are_pypto_errors
def set_options(**values):
    """Set options in the current scope.

    ``convbp_tile_shapes`` (a ConvBpTile or an (L1, L0) pair), ``vec_tile_shapes`` (ints),
    ``num_threads`` (int or None), ``memory_limit`` (bytes, or a string like "8G"; None: 80% of
    the memory available when the call starts, or ``PYPTO_MEMORY_LIMIT``), ``sum_order`` (the
    bf16 summation order, one of ``SUM_ORDERS``; None: ``PYPTO_SUM_ORDER``, else "tile").
    """
    normalized = {key: _normalize(key, value) for key, value in values.items()}
    for key, value in normalized.items():
        _set(key, value)


@argument_errors_are_pypto_errors
def get_options():
    """The effective value of every option, as a dict (copies)."""
    return {key: copy.deepcopy(_get(key)) for key in _DEFAULTS}


@argument_errors_are_pypto_errors
def reset_options():
    """Clear every value set in the current scope (at top level: back to the defaults)."""
    scopes = _scopes.get()
    if not scopes:
        with _global_lock:
            _global_scope.clear()
    else:
        _scopes.set(scopes[:-1] + ((scopes[-1][0], {}),))


class options:
    """A configuration scope, as a context manager or a decorator.

    ``with pypto.options(vec_tile_shapes=[16, 16, 16, 16]): ...`` sets the given options for the
    block; anything set inside (with ``set_*``) is discarded on exit. As a decorator it scopes
    every call of a function, a coroutine function (``async def``) or a generator function
    (each step of the generator runs in the scope; the caller's code between steps does not).
    """

    def __init__(self, name=None, **values):
        self.name = name
        self._values = {key: _normalize(key, value) for key, value in values.items()}
        # the scopes this object opened, per context: one object may serve several threads
        # and tasks at once
        self._open = contextvars.ContextVar(f"pypto_options_{id(self)}", default=())

    def __enter__(self):
        self._open.set(self._open.get() + (_open_scope(self._values),))
        return self

    def __exit__(self, *exc):
        opened = self._open.get()
        self._open.set(opened[:-1])
        _close_scope(opened[-1])
        return False

    def __call__(self, func):
        values = self._values
        if inspect.isasyncgenfunction(func):
            raise FeError(
                TypeError(
                    f"@pypto.options cannot scope the async generator function {func.__name__!r}: "
                    "use `with pypto.options(...)` inside it"
                )
            )
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def scoped_coroutine(*args, **kwargs):
                with _scope(values):
                    return await func(*args, **kwargs)

            return scoped_coroutine
        if inspect.isgeneratorfunction(func):

            @functools.wraps(func)
            def scoped_generator(*args, **kwargs):
                return (yield from _stepped_in_scope(func(*args, **kwargs), values))

            return scoped_generator

        @functools.wraps(func)
        def scoped(*args, **kwargs):
            with _scope(values):
                return func(*args, **kwargs)

        return scoped


def _stepped_in_scope(generator, values):
    """Run each step of ``generator`` inside a scope of ``values``, closed again before its
    value goes back to the caller."""
    step, arg = generator.send, None
    while True:
        with _scope(values):
            try:
                item = step(arg)
            except StopIteration as stop:
                return stop.value
        try:
            arg = yield item
            step = generator.send
        except GeneratorExit:
            with _scope(values):
                generator.close()
            raise
        except BaseException as exc:  # thrown in by the caller: passed on to the generator
            step, arg = generator.throw, exc


@argument_errors_are_pypto_errors
def set_convbp_input_tile_shapes(tile_l1_info, tile_l0_info):
    """Set the L1 and L0 tile shapes of conv_backward_input in the current scope.

    Values are checked against the NPU's rules when the op runs (TS1-TS6), since the rules
    depend on the shapes.

    Parameters
    ----------
    tile_l1_info : pypto.pypto_impl.ConvBpTileL1Info
    tile_l0_info : pypto.pypto_impl.ConvBpTileL0Info
    """
    set_options(convbp_tile_shapes=(tile_l1_info, tile_l0_info))


@argument_errors_are_pypto_errors
def get_convbp_input_tile_shapes():
    """``(ConvBpTileL1Info, ConvBpTileL0Info)`` in effect; all zeros when never set."""
    tile = _get("convbp_tile_shapes")
    return copy.copy(tile.tileL1Info), copy.copy(tile.tileL0Info)


@argument_errors_are_pypto_errors
def set_vec_tile_shapes(*shapes):
    """Set the vector tile shapes (write-out blocking) in the current scope: 4 or 5 ints."""
    set_options(vec_tile_shapes=shapes)


@argument_errors_are_pypto_errors
def get_vec_tile_shapes():
    """The vector tile shapes in effect, a list (``[]`` when never set)."""
    return list(_get("vec_tile_shapes"))


# More threads than this gain nothing on any CPU the kernel runs on, and each costs a stack
MAX_THREADS = 1024


@argument_errors_are_pypto_errors
def set_num_threads(num_threads):
    """Threads for the CPU kernel in the current scope, 1 to MAX_THREADS; None follows
    ``OMP_NUM_THREADS`` (capped at MAX_THREADS) or the CPU count."""
    set_options(num_threads=num_threads)


@functools.cache
def _env_threads(env_value):
    try:
        n = int(env_value.split(",")[0])
    except (AttributeError, ValueError):
        return None
    return min(n, MAX_THREADS) if n >= 1 else None


@argument_errors_are_pypto_errors
def get_num_threads():
    """Threads the CPU kernel will use: the scoped setting, else ``OMP_NUM_THREADS``, else the
    physical cores this process may use (affinity mask and cgroup CPU quota; ``pypto info``
    says which limit applied)."""
    return num_threads_now()


def num_threads_now():
    """get_num_threads without its argument check: the CPU backend asks on every call."""
    n = _get("num_threads")
    if n is None:
        n = _env_threads(getenv("OMP_NUM_THREADS"))
    return min(default_threads()[0], MAX_THREADS) if n is None else n


@argument_errors_are_pypto_errors
def get_sum_order(dtype="bf16"):
    """The summation order a call of ``dtype`` ("bf16", "fp16" or a pypto DataType) uses now:
    for bf16 the scoped ``sum_order``, else ``PYPTO_SUM_ORDER``, else "tile"; fp16 is always
    "sequential"."""
    name = getattr(dtype, "name", dtype)
    if name in ("fp16", "float16", "DT_FP16"):
        return "sequential"
    if name not in ("bf16", "bfloat16", "DT_BF16"):
        raise FeError(ValueError(f"dtype must be 'bf16' or 'fp16', but got {dtype!r}."))
    return bf16_sum_order_now()


def bf16_sum_order_now():
    """get_sum_order("bf16") without its argument check: the CPU backend asks on every bf16
    call."""
    order = _get("sum_order")
    if order is None:
        env = getenv("PYPTO_SUM_ORDER")
        order = DEFAULT_BF16_SUM_ORDER if not env else _sum_order(env, "PYPTO_SUM_ORDER")
    return order


MEMORY_FRACTION = 0.8  # of MemAvailable, when no limit is set


def get_memory_limit():
    """The most a call may allocate: the scoped ``memory_limit``, else ``PYPTO_MEMORY_LIMIT``,
    else 80% of the memory available now (None when the system does not say)."""
    limit = _get("memory_limit")
    if limit is None and os.environ.get("PYPTO_MEMORY_LIMIT"):
        limit = _parse_bytes(os.environ["PYPTO_MEMORY_LIMIT"], "PYPTO_MEMORY_LIMIT")
    if limit is None:
        available = _available_memory()
        limit = None if available is None else int(available * MEMORY_FRACTION)
    return limit


def _available_memory():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
