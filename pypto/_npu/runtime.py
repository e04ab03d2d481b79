"""The process's NPU runtime: bring-up, per-thread binding, device buffers, teardown.

One :class:`Runtime` per process, created on first use under a lock (so loading is lazy,
thread-safe and idempotent; a failure is remembered as the reason the NPU is unavailable).
Bring-up: libascendcl.so (RTLD_GLOBAL) -> ``aclInit`` (``ACL_ERROR_REPEAT_INITIALIZE`` means
another framework, e.g. torch_npu, initialised ACL: fine, and then we never finalise it) ->
``aclrtGetDeviceCount`` -> ``aclrtSetDevice`` -> ``aclrtCreateContext`` -> ``aclrtCreateStream``
-> SoC check -> the kernel library (its constructor registers the device binary, so it loads
after the device is up). A failed step undoes the earlier ones; ``atexit`` undoes them all.

ACL's current context is per thread, and other ACL users (torch_npu) cache theirs per thread:
so every AscendCL call of pypto, bring-up included, runs on pypto's own device thread, and the
callers' threads never see pypto's context or its ``aclrtSetDevice``. Calls are serialised on
that thread and our one stream. A forked child refuses to use the parent's runtime. At exit,
``aclFinalize`` only when pypto initialised ACL and no other ACL user is loaded.
"""

import atexit
import concurrent.futures
import contextlib
import ctypes
import os
import queue
import sys
import threading

import numpy as np

from .._core.locks import ForkSafeLock
from ..error import PyptoRtError
from .acl import open_library
from .discovery import find_acl_library, find_kernel_library, quick_unavailable_reason
from .errors import (
    ACL_ERROR_REPEAT_INITIALIZE,
    ACL_SUCCESS,
    NpuError,
    NpuUnavailableError,
    acl_error,
)
from .prototypes import (
    ACL_MEM_MALLOC_HUGE_FIRST,
    ACL_MEMCPY_DEVICE_TO_HOST,
    ACL_MEMCPY_HOST_TO_DEVICE,
    LAUNCH_SYMBOL,
)

__all__ = ["get", "unavailable_reason", "disable", "Runtime", "Session"]

DEVICE_ID = 0  # choose the NPU with ASCEND_RT_VISIBLE_DEVICES (visible devices count from 0)
SUPPORTED_SOC_PREFIXES = ("Ascend910B", "Ascend910_93")  # A2 / A3: the kernel is dav-c220 only

_lock = ForkSafeLock()  # another thread of the parent may have been bringing it up
_runtime = None
_failure = None  # why bring-up failed, once it has


class _DeviceThread:
    """The one thread that makes pypto's AscendCL calls: ``run(func)`` runs func there and
    returns its result (or raises its exception) in the caller."""

    def __init__(self):
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="pypto-npu", daemon=True)
        self._thread.start()

    def _serve(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            func, future = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(func())
                except BaseException as exc:  # handed to the caller
                    future.set_exception(exc)

    def run(self, func):
        if threading.current_thread() is self._thread:
            return func()
        future = concurrent.futures.Future()
        self._jobs.put((func, future))
        return future.result()

    def stop(self):
        self._jobs.put(None)


# Other users of AscendCL in this process: pypto then never finalises it (their own shutdown
# may still need it, and may run after ours).
OTHER_ACL_USERS = ("torch_npu", "mindspore", "acl", "npu_bridge", "tbe")


class Runtime:
    """ACL initialised, our device, context and stream, and the loaded kernel library."""

    def __init__(
        self,
        acl,
        kernel,
        context,
        stream,
        owns_init,
        worker=None,
        acl_path=None,
        kernel_path=None,
        soc="",
    ):
        self.acl, self.kernel = acl, kernel
        self.context, self.stream = context, stream
        self.owns_init = owns_init  # False when another framework ran aclInit: never finalise
        self.worker = worker  # the device thread every ACL call of this runtime runs on
        self.acl_path, self.kernel_path, self.soc = acl_path, kernel_path, soc
        self.pid = os.getpid()
        self.closed = False
        self._lock = threading.Lock()

    def unusable_reason(self):
        if os.getpid() != self.pid:
            return (
                f"pypto's NPU runtime was initialised in process {self.pid} and cannot be used "
                f"in the forked child {os.getpid()}: start workers with the 'spawn' method"
            )
        if self.closed:
            return "pypto's NPU runtime was shut down at interpreter exit"
        return None

    def bind(self):
        """Make our context current in the calling thread (ACL contexts are per thread)."""
        reason = self.unusable_reason()
        if reason:
            raise NpuUnavailableError(reason)
        self.acl.check(self.acl.aclrtSetCurrentContext(self.context), "aclrtSetCurrentContext")

    def call(self, work):
        """``work(session)`` on the device thread: exclusive use of the stream, our context
        current there, every buffer freed at the end; its result, or its exception."""
        reason = self.unusable_reason()  # before the lock, which a fork may have left held
        if reason:
            raise NpuUnavailableError(reason)

        def on_device_thread():
            with self._lock:
                self.bind()
                session = Session(self)
                try:
                    result = work(session)
                except BaseException:
                    session.release(after_error=True)
                    raise
                session.release(after_error=False)
                return result

        return self.worker.run(on_device_thread)

    def close(self):
        """Tear down in reverse order of bring-up; best effort, at most once, never in a child."""
        if self.closed or os.getpid() != self.pid:
            return
        with self._lock:
            self.closed = True
            acl, steps = (
                self.acl,
                [
                    lambda: acl.aclrtSetCurrentContext(self.context),
                    lambda: acl.aclrtSynchronizeStream(self.stream),
                    lambda: acl.aclrtDestroyStream(self.stream),
                    lambda: acl.aclrtDestroyContext(self.context),
                    lambda: acl.aclrtResetDevice(DEVICE_ID),
                ],
            )
            if self.owns_init and not any(name in sys.modules for name in OTHER_ACL_USERS):
                steps.append(acl.aclFinalize)

            def teardown():
                for step in steps:
                    with contextlib.suppress(Exception):
                        step()

            if self.worker is None:
                teardown()
            else:
                self.worker.run(teardown)
                self.worker.stop()


class Session:
    """Device buffers and stream operations of one call, all checked, all released."""

    def __init__(self, runtime):
        self._acl, self._kernel, self._stream = runtime.acl, runtime.kernel, runtime.stream
        self._buffers = []
        self._sizes = {}  # device pointer -> bytes allocated there

    def alloc(self, nbytes):
        pointer = ctypes.c_void_p()
        ret = self._acl.aclrtMalloc(ctypes.byref(pointer), nbytes, ACL_MEM_MALLOC_HUGE_FIRST)
        self._acl.check(ret, "aclrtMalloc")
        self._buffers.append(pointer.value)
        self._sizes[pointer.value] = nbytes
        return pointer.value

    def upload(self, array):
        array = np.ascontiguousarray(array)
        pointer = self.alloc(array.nbytes)
        self.copy_in(pointer, array)
        return pointer

    def copy_in(self, pointer, array):
        """Copy a host array to the start of a buffer this session allocated. destMax is the
        buffer's size, so the runtime itself refuses a copy that would not fit."""
        array = np.ascontiguousarray(array)
        room = self._sizes[pointer]
        if array.nbytes > room:
            raise PyptoRtError(
                RuntimeError(
                    f"internal error: {array.nbytes} bytes do not fit the {room}-byte device buffer"
                )
            )
        ret = self._acl.aclrtMemcpy(
            pointer, room, array.ctypes.data, array.nbytes, ACL_MEMCPY_HOST_TO_DEVICE
        )
        self._acl.check(ret, "aclrtMemcpy")

    def download(self, pointer, nbytes):
        host = np.empty(nbytes, dtype=np.uint8)
        ret = self._acl.aclrtMemcpy(
            host.ctypes.data, nbytes, pointer, nbytes, ACL_MEMCPY_DEVICE_TO_HOST
        )
        self._acl.check(ret, "aclrtMemcpy")
        return host

    def zero(self, pointer, nbytes):
        """Zero device memory, in stream order (before the launches that follow)."""
        self._acl.check(
            self._acl.aclrtMemsetAsync(pointer, nbytes, 0, nbytes, self._stream), "aclrtMemsetAsync"
        )

    def launch(self, blocks, dy, weight, dx, workspace, launch):
        ret = getattr(self._kernel, LAUNCH_SYMBOL)(
            blocks, self._stream, dy, weight, dx, workspace, ctypes.byref(launch)
        )
        if ret != ACL_SUCCESS:
            raise acl_error(ret, LAUNCH_SYMBOL, self._acl.recent_message())

    def synchronize(self):
        """Wait for the stream; kernel faults (AI Core exceptions) are reported here."""
        self._acl.check(self._acl.aclrtSynchronizeStream(self._stream), "aclrtSynchronizeStream")

    def free(self, pointer):
        self._buffers.remove(pointer)
        self._sizes.pop(pointer, None)
        self._acl.check(self._acl.aclrtFree(pointer), "aclrtFree")

    def release(self, after_error):
        """Free every buffer still held. After an error, first wait for work that may use them."""
        if after_error:
            with contextlib.suppress(Exception):
                self.synchronize()
        first_error = None
        while self._buffers:
            try:
                self.free(self._buffers[-1])
            except NpuError as exc:
                first_error = first_error or exc
        if first_error is not None and not after_error:
            raise first_error


def _bring_up():
    reason = quick_unavailable_reason()
    if reason:
        raise NpuUnavailableError(reason)
    acl_path, kernel_path = find_acl_library(), find_kernel_library()
    worker = _DeviceThread()
    try:
        runtime = worker.run(lambda: _bring_up_here(acl_path, kernel_path, worker))
    except BaseException:
        worker.stop()
        raise
    atexit.register(runtime.close)
    return runtime


def _bring_up_here(acl_path, kernel_path, worker):
    """The bring-up steps, on the device thread."""
    acl = open_library(acl_path, "acl")
    undo = []
    try:
        ret = acl.aclInit(None)
        owns_init = ret != ACL_ERROR_REPEAT_INITIALIZE
        if owns_init:
            acl.check(ret, "aclInit")
            undo.append(acl.aclFinalize)
        count = ctypes.c_uint32(0)
        acl.check(acl.aclrtGetDeviceCount(ctypes.byref(count)), "aclrtGetDeviceCount")
        if count.value == 0:
            raise NpuUnavailableError(
                "AscendCL sees no NPU (aclrtGetDeviceCount = 0; check "
                "ASCEND_RT_VISIBLE_DEVICES and the driver)"
            )
        acl.check(acl.aclrtSetDevice(DEVICE_ID), "aclrtSetDevice")
        undo.append(lambda: acl.aclrtResetDevice(DEVICE_ID))
        context = ctypes.c_void_p()
        acl.check(acl.aclrtCreateContext(ctypes.byref(context), DEVICE_ID), "aclrtCreateContext")
        undo.append(lambda: acl.aclrtDestroyContext(context))
        stream = ctypes.c_void_p()
        acl.check(acl.aclrtCreateStream(ctypes.byref(stream)), "aclrtCreateStream")
        undo.append(lambda: acl.aclrtDestroyStream(stream))
        soc = (acl.aclrtGetSocName() or b"").decode(errors="replace")
        if not soc.startswith(SUPPORTED_SOC_PREFIXES):
            raise NpuUnavailableError(
                f"the NPU is {soc or 'of unknown SoC'}; pypto's kernel runs "
                "on Atlas A2/A3 (Ascend910B*, Ascend910_93*) only"
            )
        kernel = open_library(kernel_path, "kernel", message_source=acl)
    except BaseException:
        for step in reversed(undo):
            with contextlib.suppress(Exception):
                step()
        raise
    return Runtime(acl, kernel, context, stream, owns_init, worker, acl_path, kernel_path, soc)


def get():
    """The runtime, brought up on first use; NpuUnavailableError with the reason if it cannot be."""
    global _runtime, _failure
    if _runtime is None and _failure is None:
        with _lock:
            if _runtime is None and _failure is None:
                try:
                    _runtime = _bring_up()
                except Exception as exc:  # remembered: bring-up is tried once per process
                    _failure = (
                        exc.text
                        if isinstance(exc, NpuError)
                        else f"NPU bring-up failed: {type(exc).__name__}: {exc}"
                    )
    if _failure is not None:
        raise NpuUnavailableError(_failure)
    return _runtime


def disable(reason):
    """Use the NPU no more in this process (after a device error in a call): from now on it is
    unavailable, for ``reason``."""
    global _failure
    with _lock:
        _failure = reason


def unavailable_reason():
    """Why the NPU path cannot run here, or None when it can. Never raises."""
    if _failure is not None:  # the common case on a host without an NPU: no exception built
        return _failure
    try:
        return get().unusable_reason()
    except NpuUnavailableError as exc:
        return exc.reason
