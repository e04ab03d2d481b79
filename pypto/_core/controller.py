"""pypto.function: the scope a computation runs in (upstream records a graph there)."""

import contextlib
import threading

from ..error import FeError, PyptoError
from ..tensor import Tensor
from . import options as _config

__all__ = ["function"]

_active = threading.local()


class FunctionScope:
    """What ``with pypto.function(name, *tensors) as f`` yields: its name and Tensor arguments."""

    def __init__(self, name, tensors):
        self.name = name
        self.tensors = tensors

    def __repr__(self):
        return f"FunctionScope({self.name!r}, {len(self.tensors)} tensors)"


@contextlib.contextmanager
def function(name, *tensors):
    """Scope a computation, as upstream's ``pypto.function``.

    Only Tensor arguments are kept. Configuration set inside (tile shapes, vector tiles,
    threads) disappears on exit. Nesting raises ``FeError``; an exception other than a
    PyptoError raised inside is re-raised wrapped in ``FeError``.
    """
    if getattr(_active, "name", None) is not None:
        raise FeError(RuntimeError("function nested is not allowed"))
    _active.name = name
    try:
        with _config._scope():
            yield FunctionScope(name, [t for t in tensors if isinstance(t, Tensor)])
    except PyptoError:
        raise
    except Exception as exc:
        raise FeError(exc) from exc
    finally:
        _active.name = None
