"""Which backend runs conv_backward_input: ``auto`` (the default), ``cpu`` or ``npu``.

``pypto.set_device(...)`` wins over the ``PYPTO_DEVICE`` environment variable, which wins over
``auto``. ``auto`` uses the NPU when it is available, its kernel passed the self-check on this
device (``_trust``) and the problem has a launch plan on it, else the CPU; ``npu`` requested but
unavailable raises, naming the reason. Cheap on every call: this module loads nothing, and
availability and the verdict are computed once per process.
"""

import os
import warnings

from ..error import FeError, argument_errors_are_pypto_errors
from ._discovery import quick_unavailable_reason
from ._errors import NpuUnavailableError

__all__ = ["set_device", "get_device", "select_backend", "DEVICE_ENV", "DEVICES"]

DEVICE_ENV = "PYPTO_DEVICE"
DEVICES = ("auto", "cpu", "npu")
_requested = None  # set_device's value; None follows the environment


def _checked(device, source):
    if not isinstance(device, str) or device.strip().lower() not in DEVICES:
        raise FeError(ValueError(f"{source}={device!r}: expected one of {', '.join(DEVICES)}"))
    return device.strip().lower()


@argument_errors_are_pypto_errors
def set_device(device):
    """Choose the backend for this process: "auto", "cpu" or "npu" (None: back to PYPTO_DEVICE)."""
    global _requested
    _requested = None if device is None else _checked(device, "pypto.set_device(device)")


@argument_errors_are_pypto_errors
def get_device():
    """The backend requested: set_device's value, else PYPTO_DEVICE, else "auto"."""
    if _requested is not None:
        return _requested
    env = os.environ.get(DEVICE_ENV)
    return _checked(env, DEVICE_ENV) if env else "auto"


def _source():
    return f"pypto.set_device({_requested!r})" if _requested is not None else f"{DEVICE_ENV}=npu"


def select_backend(call=None):
    """``"cpu"`` or ``"npu"`` for the next call (``call``: a ValidatedCall, to check its plan).

    ``auto`` takes the NPU only when its kernel passed the self-check on this device; ``npu``
    takes it whatever the verdict (warning once when a known verdict failed). Raises
    NpuUnavailableError (a PyptoError) when the NPU was requested and cannot run it.
    """
    device = get_device()
    if device == "cpu":
        return "cpu"
    # the cached platform/device-node check first: on a host without an NPU (the common case)
    # it decides alone, without an import or a library load on every call
    reason = quick_unavailable_reason()
    if reason is None:
        from . import runtime_unavailable_reason, unavailable_reason

        # auto: the runtime and the self-check; npu: the runtime only
        reason = unavailable_reason() if device == "auto" else runtime_unavailable_reason()
    if reason is None and call is not None:
        from ._plan import plan_launches

        try:
            plan_launches(call)
        except NpuUnavailableError as exc:
            reason = exc.reason
    if reason is None:
        if device == "npu":
            _warn_if_untrusted()
        return "npu"
    if device == "npu":
        raise NpuUnavailableError(f"{_source()} requested, but the NPU cannot be used: {reason}")
    return "cpu"


_warned = False


def _warn_if_untrusted():
    global _warned
    if _warned:
        return
    from . import known_self_check

    verdict = known_self_check()
    if verdict is not None and not verdict["passed"]:
        _warned = True
        warnings.warn(f"pypto: {_source()} forces the NPU, whose kernel failed its self-check on "
                      f"this device ({verdict['checked_at']}): {verdict['summary']}",
                      RuntimeWarning, stacklevel=4)
