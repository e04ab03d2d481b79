"""pypto's Atlas A2/A3 NPU backend: an AscendC dgrad kernel driven through AscendCL and ctypes.

Public here: backend selection (:func:`set_device`, :func:`get_device`, :func:`select_backend`,
env ``PYPTO_DEVICE``), :func:`is_available` / :func:`unavailable_reason`, the NPU op
:func:`conv_backward_input_npu` (same contract as ``pypto._cpu.conv_backward_input_cpu``) and
the error classes. Importing this package loads no library: ACL is opened on first use.

Modules: ``_discovery`` (where things are), ``_prototypes`` (the C prototype table),
``_acl`` (loading and binding), ``_runtime`` (bring-up, threads, buffers, teardown),
``_launch_struct`` (ctypes mirror of the kernel's tiling header), ``_plan`` (user tiles ->
AscendC launches), ``_decompose`` (exact rewrites of what one launch cannot hold), ``_layout``
(NCHW <-> NC1HWC0 / FRACTAL_Z), ``_conv`` (the op), ``_select`` (backend choice), ``_errors``.
The device side lives beside them in ``kernel/``: the AscendC source, the tiling header both
sides share, CMake and ``build.py``.
"""

from ._errors import (AclError, AclInternalError, AclResourceError, AclUsageError,
                      KernelNotRunError, NpuError, NpuUnavailableError, NpuUnsupportedError)
from ._select import get_device, select_backend, set_device

__all__ = [
    "is_available", "unavailable_reason", "set_device", "get_device", "select_backend",
    "conv_backward_input_npu", "NpuError", "NpuUnavailableError", "NpuUnsupportedError",
    "AclError", "AclUsageError", "AclResourceError", "AclInternalError", "KernelNotRunError",
]


def is_available():
    """True when conv_backward_input can run on an Atlas A2/A3 NPU here. Never raises.

    Without a ``/dev/davinci<N>`` node this answers from the file system alone (no library is
    loaded); with one, the first call brings the runtime up (aclInit, device, context, stream).
    """
    return unavailable_reason() is None


def unavailable_reason():
    """Why the NPU path cannot run here (a sentence), or None when it can. Never raises."""
    from ._discovery import quick_unavailable_reason

    reason = quick_unavailable_reason()
    if reason is not None:
        return reason
    from ._runtime import unavailable_reason as runtime_reason

    return runtime_reason()


def conv_backward_input_npu(call, dy, w):
    """dx on the NPU for a validated call and host arrays dy (NCHW) and w; an NCHW array."""
    from ._conv import conv_backward_input_npu as run

    return run(call, dy, w)
