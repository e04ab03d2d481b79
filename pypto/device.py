"""Which device computes conv_backward_input, and the NPU backend's public face.

``pypto.set_device(...)`` wins over the ``PYPTO_DEVICE`` environment variable, which wins over
``auto``. ``auto`` uses the NPU when it is available, its kernel passed the self-check on this
device (``pypto._npu.trust``) and the problem has a launch plan on it, else the CPU; ``npu``
requested but unavailable raises, naming the reason. Cheap on every call: this module loads
nothing on a host without an NPU, and availability and the verdict are computed once per
process.

Public here: :func:`set_device`, :func:`get_device`, :func:`select_backend`,
:func:`is_available` / :func:`unavailable_reason`, the self-check (:func:`self_check`,
:func:`known_self_check`), the NPU op :func:`conv_backward_input_npu` (same contract as
``pypto._kernels.conv_backward_input_cpu``) and the error classes. The backend itself is
``pypto._npu``.
"""

import warnings

from ._core.environ import getenv
from ._npu.discovery import quick_unavailable_reason
from ._npu.errors import (
    AclError,
    AclInternalError,
    AclResourceError,
    AclUsageError,
    KernelNotRunError,
    NpuError,
    NpuUnavailableError,
    NpuUnsupportedError,
)
from .error import FeError, argument_errors_are_pypto_errors

__all__ = [
    "is_available",
    "unavailable_reason",
    "runtime_unavailable_reason",
    "self_check",
    "known_self_check",
    "disable_after_error",
    "set_device",
    "get_device",
    "select_backend",
    "conv_backward_input_npu",
    "NpuError",
    "NpuUnavailableError",
    "NpuUnsupportedError",
    "AclError",
    "AclUsageError",
    "AclResourceError",
    "AclInternalError",
    "KernelNotRunError",
    "DEVICE_ENV",
    "DEVICES",
]


def is_available():
    """True when ``auto`` sends conv_backward_input to an Atlas A2/A3 NPU here: the runtime is
    up and the kernel passed its self-check on this device. Never raises.

    Without a ``/dev/davinci<N>`` node this answers from the file system alone (no library is
    loaded); with one, the first call brings the runtime up (aclInit, device, context, stream)
    and, unless a verdict is cached, runs the self-check (:func:`self_check`).
    """
    return unavailable_reason() is None


def runtime_unavailable_reason():
    """Why the NPU cannot run at all here (a sentence), or None when it can (``npu`` mode needs
    no more). Never raises."""
    reason = quick_unavailable_reason()
    if reason is not None:
        return reason
    from ._npu.runtime import unavailable_reason as runtime_reason

    return runtime_reason()


def unavailable_reason():
    """Why ``auto`` does not use the NPU here (a sentence), or None when it does: the NPU
    cannot run, or its kernel failed the self-check on this device. Never raises."""
    reason = runtime_unavailable_reason()
    if reason is not None:
        return reason
    try:
        verdict = self_check()
    except NpuUnavailableError as exc:
        return exc.reason
    if not verdict["passed"]:
        return (
            f"the NPU kernel failed its self-check ({verdict['checked_at']}, "
            f"{verdict['source']}): {verdict['summary']}; PYPTO_DEVICE=npu forces it anyway, "
            "`pypto selfcheck --again` checks again"
        )
    return None


def self_check(again=False):
    """The self-check's verdict for this device, kernel library and toolkit (a dict: passed,
    summary, problems, checked_at, source), from this process, the cache, or run now (``again``:
    run it even when known). NpuUnavailableError when the NPU cannot run at all."""
    from ._kernels import conv_backward_input_cpu  # the reference the NPU must equal
    from ._npu import runtime as _runtime
    from ._npu import trust as _trust
    from ._npu.run import conv_backward_input_npu as run

    return _trust.verdict(_runtime.get(), run, conv_backward_input_cpu, again=again)


def known_self_check():
    """The verdict if one is known (this process or the cache), without running anything;
    None when unknown or when the NPU cannot run."""
    if runtime_unavailable_reason() is not None:
        return None
    from ._npu import runtime as _runtime
    from ._npu import trust as _trust

    return _trust.known_verdict(_runtime.get())


def disable_after_error(error):
    """A call failed on the device (``error``): the NPU is used no more in this process."""
    from ._npu import runtime as _runtime

    _runtime.disable(
        f"the NPU was disabled for this process after a device error in a call: {error.text}"
    )


def conv_backward_input_npu(call, dy, w):
    """dx on the NPU for a validated call and host arrays dy (NCHW) and w; an NCHW array."""
    from ._npu.run import conv_backward_input_npu as run

    return run(call, dy, w)


# --- the choice -------------------------------------------------------------------------------
#: The environment variable that chooses the backend when set_device was not called.
DEVICE_ENV = "PYPTO_DEVICE"
#: The backends set_device and PYPTO_DEVICE accept.
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
    return _device()


def _device():
    # get_device without its argument check: select_backend runs on every call
    if _requested is not None:
        return _requested
    env = getenv(DEVICE_ENV)
    return _checked(env, DEVICE_ENV) if env else "auto"


def _source():
    return f"pypto.set_device({_requested!r})" if _requested is not None else f"{DEVICE_ENV}=npu"


def select_backend(call=None):
    """``"cpu"`` or ``"npu"`` for the next call (``call``: a ValidatedCall, to check its plan).

    ``auto`` takes the NPU only when its kernel passed the self-check on this device; ``npu``
    takes it whatever the verdict (warning once when a known verdict failed). Raises
    NpuUnavailableError (a PyptoError) when the NPU was requested and cannot run it.
    """
    device = _device()
    if device == "cpu":
        return "cpu"
    # the cached platform/device-node check first: on a host without an NPU (the common case)
    # it decides alone, without an import or a library load on every call
    reason = quick_unavailable_reason()
    if reason is None:
        # auto: the runtime and the self-check; npu: the runtime only
        reason = unavailable_reason() if device == "auto" else runtime_unavailable_reason()
    if reason is None and call is not None:
        from ._npu.plan import plan_launches

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
    verdict = known_self_check()
    if verdict is not None and not verdict["passed"]:
        _warned = True
        warnings.warn(
            f"pypto: {_source()} forces the NPU, whose kernel failed its self-check on "
            f"this device ({verdict['checked_at']}): {verdict['summary']}",
            RuntimeWarning,
            stacklevel=4,
        )
