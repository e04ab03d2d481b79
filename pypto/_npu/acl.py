"""Open a shared library and bind its entries of the prototype table; check ACL return codes.

``_runtime`` calls these once, under its lock. A library that lacks a symbol of the table is
"NPU unavailable" (a CANN too old, or a kernel library built from other sources), never an
import error of the package.
"""

import ctypes
import os

from .elf import elf_problem
from .errors import ACL_SUCCESS, NpuUnavailableError, acl_error
from .prototypes import PROTOTYPES

__all__ = ["BoundLibrary", "open_library"]


class BoundLibrary:
    """A loaded library whose table entries are attributes with argtypes and restype set."""

    def __init__(self, path, handle, functions):
        self.path, self._handle = path, handle
        for name, function in functions.items():
            setattr(self, name, function)

    def recent_message(self):
        """The runtime's last error text for this thread (read at once: the next call clears it)."""
        get = getattr(self, "aclGetRecentErrMsg", None)
        text = get() if get else None
        return text.decode(errors="replace").strip() if text else ""

    def check(self, ret, api):
        """Raise the error class of ``ret``, with the runtime's message, unless it is success."""
        if ret != ACL_SUCCESS:
            raise acl_error(ret, api, self.recent_message())


# How each library joins the process's symbol scope.
#  - "acl" (libascendcl.so) RTLD_GLOBAL: the kernel library's constructor registers its device
#    binary through ACL and runtime symbols that it may not link itself (ascendc_library links
#    them INTERFACE only), so they must be in the global scope before it loads.
#  - "kernel" (libpypto_conv_dx.so) RTLD_LOCAL: it statically contains CANN's AscendC launch
#    runtime (LaunchAscendKernel, RegisterAscendBinary, ...) and the generated stub's globals,
#    under the same names as every other ascendc_library-built library. Global, they would
#    interpose on (or be interposed by) such a library loaded later in the process, whatever CANN
#    version each was built with. pypto needs only aclrtlaunch_pypto_conv_dx, through this
#    handle; the build also exports nothing else (pypto/_npu/kernel/CMakeLists.txt).
_SCOPE = {"acl": ctypes.RTLD_GLOBAL, "kernel": ctypes.RTLD_LOCAL}


def open_library(path, library, message_source=None):
    """dlopen ``path`` (in the scope ``_SCOPE`` gives ``library``) and bind the table entries
    tagged ``library``. ``message_source`` (the ACL library) supplies aclGetRecentErrMsg to a
    library without it.
    """
    problem = elf_problem(path)  # a truncated library would end the process inside dlopen
    if problem:
        raise NpuUnavailableError(f"cannot load {path}: {problem}")
    try:
        handle = ctypes.CDLL(str(path), mode=os.RTLD_NOW | _SCOPE[library])
    except OSError as exc:
        raise NpuUnavailableError(f"cannot load {path}: {exc}") from None
    functions = {}
    for name, (tag, restype, argtypes) in PROTOTYPES.items():
        if tag != library:
            continue
        try:
            function = getattr(handle, name)
        except AttributeError:
            raise NpuUnavailableError(
                f"{path} has no symbol {name} (a CANN too old for pypto, or "
                "a library built from other sources)"
            ) from None
        function.restype, function.argtypes = restype, argtypes
        functions[name] = function
    if message_source is not None:
        functions.setdefault("aclGetRecentErrMsg", message_source.aclGetRecentErrMsg)
    return BoundLibrary(path, handle, functions)
