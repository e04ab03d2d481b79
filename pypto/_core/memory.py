"""The host memory guard both backends run before they copy or allocate anything."""

import resource

from ..error import PyptoMemoryError
from . import options as _config
from .environ import getenv

__all__ = ["check_host_memory", "limit_set"]

_ALWAYS_FITS = 32 << 20  # below this, no call reads /proc/meminfo (it costs ~10 µs)


def _size(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} bytes"


def address_space_room():
    """Bytes the address-space limit (RLIMIT_AS, ``ulimit -v``) leaves this process, or None
    when there is no such limit."""
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None
    return max(0, soft - mapped)


_READ_NOW = object()


def limit_set(room):
    """True when a limit was set for this call: an address-space limit (``room``: what
    ``address_space_room()`` said), ``memory_limit`` or ``PYPTO_MEMORY_LIMIT``. Without one,
    needs under _ALWAYS_FITS pass without reading /proc/meminfo."""
    return (
        room is not None
        or _config._get("memory_limit") is not None
        or getenv("PYPTO_MEMORY_LIMIT") is not None
    )


def check_host_memory(need, problem, parts, room=_READ_NOW, limited=None):
    """Raise PyptoMemoryError when ``need`` bytes exceed the memory limit.

    ``parts`` says what besides the output the estimate counts, for the message. The limit is
    ``memory_limit`` / ``PYPTO_MEMORY_LIMIT``, else 80% of MemAvailable (``_config``), and never
    more than the address-space limit leaves (``room``: what ``address_space_room()`` said,
    when the caller read it already for this call; else read here). ``limited``: what
    ``limit_set(room)`` said, when the caller asked it already for this call.
    """
    if room is _READ_NOW:
        room = address_space_room()
    if need < _ALWAYS_FITS and not (limit_set(room) if limited is None else limited):
        return
    limit, what = _config.get_memory_limit(), "the memory limit is"
    if room is not None and (limit is None or room < limit):
        limit, what = room, "the address-space limit (RLIMIT_AS, ulimit -v) leaves"
    if limit is not None and need > limit:
        p = problem
        raise PyptoMemoryError(
            f"conv_backward_input would need about {_size(need)} (output "
            f"{_size(p.n * p.cin * p.hin * p.win * p.dtype_size)} plus {parts}) but {what} "
            f"{_size(limit)}; raise it with pypto.set_options(memory_limit=...), "
            "PYPTO_MEMORY_LIMIT or ulimit -v, or use smaller shapes"
        )
