"""The host memory guard both backends run before they copy or allocate anything."""

import os

from . import _config
from .error import PyptoMemoryError

__all__ = ["check_host_memory"]

_ALWAYS_FITS = 32 << 20  # below this, no call reads /proc/meminfo (it costs ~10 µs)


def _size(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} bytes"


def check_host_memory(need, problem, parts):
    """Raise PyptoMemoryError when ``need`` bytes exceed the memory limit.

    ``parts`` says what besides the output the estimate counts, for the message. The limit is
    ``memory_limit`` / ``PYPTO_MEMORY_LIMIT``, else 80% of MemAvailable (``_config``).
    """
    if need < _ALWAYS_FITS and _config._get("memory_limit") is None \
            and "PYPTO_MEMORY_LIMIT" not in os.environ:
        return
    limit = _config.get_memory_limit()
    if limit is not None and need > limit:
        p = problem
        raise PyptoMemoryError(
            f"conv_backward_input would need about {_size(need)} (output "
            f"{_size(p.n * p.cin * p.hin * p.win * p.dtype_size)} plus {parts}) but the memory "
            f"limit is {_size(limit)}; raise it with pypto.set_options(memory_limit=...) or "
            "PYPTO_MEMORY_LIMIT, or use smaller shapes")
