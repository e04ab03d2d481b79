"""Environment variables read on every call, without os.environ's cost for a missing name.

``os.environ.get`` of a name that is not set costs ~0.7 µs (its mapping raises and catches a
KeyError inside); a call reads three such names (PYPTO_DEVICE, PYPTO_MEMORY_LIMIT,
OMP_NUM_THREADS), a tenth of a small call. This reads the same live mapping, so a variable set
or removed through ``os.environ`` at any time is seen by the next call.
"""

import os

__all__ = ["getenv"]

# CPython's os._Environ: its dict of encoded names and values, and its codecs
_ENVIRON = type(os.environ) if hasattr(os.environ, "_data") else None


def getenv(name):
    """``os.environ.get(name)``: the value, or None when ``name`` is not set."""
    environ = os.environ  # looked up each time: a test may replace it
    if type(environ) is not _ENVIRON:
        return environ.get(name)
    value = environ._data.get(environ.encodekey(name))
    return None if value is None else environ.decodevalue(value)
