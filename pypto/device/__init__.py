"""pypto's Atlas A2/A3 NPU backend: an AscendC dgrad kernel driven through AscendCL and ctypes.

Public here: backend selection (:func:`set_device`, :func:`get_device`, :func:`select_backend`,
env ``PYPTO_DEVICE``), :func:`is_available` / :func:`unavailable_reason`, the NPU op
:func:`conv_backward_input_npu` (same contract as ``pypto._cpu.conv_backward_input_cpu``) and
the error classes. Importing this package loads no library: ACL is opened on first use.

Modules: ``_discovery`` (where things are), ``_prototypes`` (the C prototype table),
``_acl`` (loading and binding), ``_runtime`` (bring-up, threads, buffers, teardown),
``_launch_struct`` (ctypes mirror of the kernel's tiling header), ``_trust`` (the self-check
that ``auto`` needs, and its cache), ``_plan`` (user tiles ->
AscendC launches), ``_decompose`` (exact rewrites of what one launch cannot hold), ``_layout``
(NCHW <-> NC1HWC0 / FRACTAL_Z), ``_conv`` (the op), ``_select`` (backend choice), ``_errors``.
The device side lives beside them in ``kernel/``: the AscendC source, the tiling header both
sides share, CMake and ``build.py``.
"""

from ._errors import (AclError, AclInternalError, AclResourceError, AclUsageError,
                      KernelNotRunError, NpuError, NpuUnavailableError, NpuUnsupportedError)
from ._select import get_device, select_backend, set_device

__all__ = [
    "is_available", "unavailable_reason", "runtime_unavailable_reason", "self_check",
    "known_self_check", "disable_after_error", "set_device", "get_device", "select_backend",
    "conv_backward_input_npu", "NpuError", "NpuUnavailableError", "NpuUnsupportedError",
    "AclError", "AclUsageError", "AclResourceError", "AclInternalError", "KernelNotRunError",
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
    from ._discovery import quick_unavailable_reason

    reason = quick_unavailable_reason()
    if reason is not None:
        return reason
    from ._runtime import unavailable_reason as runtime_reason

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
        return (f"the NPU kernel failed its self-check ({verdict['checked_at']}, "
                f"{verdict['source']}): {verdict['summary']}; PYPTO_DEVICE=npu forces it anyway, "
                "`pypto selfcheck --again` checks again")
    return None


def self_check(again=False):
    """The self-check's verdict for this device, kernel library and toolkit (a dict: passed,
    summary, problems, checked_at, source), from this process, the cache, or run now (``again``:
    run it even when known). NpuUnavailableError when the NPU cannot run at all."""
    from . import _runtime, _trust
    from ._conv import conv_backward_input_npu as run

    return _trust.verdict(_runtime.get(), run, again=again)


def known_self_check():
    """The verdict if one is known (this process or the cache), without running anything;
    None when unknown or when the NPU cannot run."""
    if runtime_unavailable_reason() is not None:
        return None
    from . import _runtime, _trust

    return _trust.known_verdict(_runtime.get())


def disable_after_error(error):
    """A call failed on the device (``error``): the NPU is used no more in this process."""
    from . import _runtime

    _runtime.disable(f"the NPU was disabled for this process after a device error in a call: "
                     f"{error.text}")


def conv_backward_input_npu(call, dy, w):
    """dx on the NPU for a validated call and host arrays dy (NCHW) and w; an NCHW array."""
    from ._conv import conv_backward_input_npu as run

    return run(call, dy, w)
