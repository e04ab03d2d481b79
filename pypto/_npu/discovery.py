"""Where the NPU pieces are: device nodes, libascendcl.so, our kernel library. Files only.

Nothing here loads a library or talks to a driver, so every function is cheap and free of side
effects; ``_runtime`` does the loading.

Environment:
  ``ASCEND_HOME_PATH``, then ``ASCEND_TOOLKIT_HOME`` (both set by CANN's set_env.sh), then the
  standard install paths: the toolkit whose ``lib64`` holds libascendcl.so.
  ``PYPTO_NPU_KERNEL_LIB``: an explicit path to the kernel library (else the one built into
  ``pypto/_npu/lib``).
  ``PYPTO_NPU_DEV_DIR``: the directory searched for ``davinci<N>`` device nodes (default
  ``/dev``), for containers that mount them elsewhere and for tests.
"""

import functools
import os
import platform
import re
from pathlib import Path

from .errors import NpuUnavailableError
from .kernel.build import KERNEL_NAME, STANDARD_TOOLKIT_ROOTS  # the build's (stdlib only)

__all__ = ["device_nodes", "quick_unavailable_reason", "find_acl_library", "find_kernel_library"]

DEV_DIR_ENV = "PYPTO_NPU_DEV_DIR"
KERNEL_LIB_ENV = "PYPTO_NPU_KERNEL_LIB"
TOOLKIT_ENVS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
ACL_LIBRARY = "libascendcl.so"
KERNEL_LIBRARY = f"lib{KERNEL_NAME}.so"
PACKAGED_KERNEL = Path(__file__).resolve().parent / "lib" / KERNEL_LIBRARY
_DAVINCI = re.compile(r"^davinci\d+$")


def device_nodes():
    """Names of the ``davinci<N>`` nodes (one per NPU); control nodes are not counted."""
    try:
        return sorted(
            name
            for name in os.listdir(os.environ.get(DEV_DIR_ENV) or "/dev")
            if _DAVINCI.match(name)
        )
    except OSError:
        return []


@functools.lru_cache(maxsize=1)  # devices do not appear mid-process; keeps auto mode cheap
def quick_unavailable_reason():
    """Why the NPU cannot be here, from the platform and the device nodes alone; None if it may."""
    if platform.system() != "Linux":
        return f"the NPU path needs Linux (this is {platform.system()})"
    if not device_nodes():
        where = os.environ.get(DEV_DIR_ENV) or "/dev"
        return f"no Ascend NPU device node ({where}/davinci<N>) on this machine"
    return None


def _toolkit_roots():
    for source in TOOLKIT_ENVS:
        if os.environ.get(source):
            yield source, Path(os.environ[source]).expanduser()
    for root in STANDARD_TOOLKIT_ROOTS:
        yield "standard path", Path(root).expanduser()


def find_acl_library():
    """Absolute path of libascendcl.so, or NpuUnavailableError listing where it was looked for."""
    looked = []
    for source, root in _toolkit_roots():
        for lib_dir in (root / "lib64", root / f"{platform.machine()}-linux" / "lib64"):
            candidate = lib_dir / ACL_LIBRARY
            if candidate.is_file():
                return candidate
            looked.append(f"{candidate} ({source})")
    raise NpuUnavailableError(
        f"{ACL_LIBRARY} not found; source CANN's set_env.sh or set ASCEND_HOME_PATH. Looked in: "
        + ", ".join(looked)
    )


def find_kernel_library():
    """Absolute path of our AscendC library, or NpuUnavailableError saying how to get one."""
    explicit = os.environ.get(KERNEL_LIB_ENV)
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise NpuUnavailableError(f"{KERNEL_LIB_ENV}={explicit} is not a file")
        return path.resolve()
    if PACKAGED_KERNEL.is_file():
        return PACKAGED_KERNEL
    raise NpuUnavailableError(
        f"the NPU kernel library is not built ({PACKAGED_KERNEL} is missing): reinstall pypto on "
        "the Atlas host after sourcing CANN's set_env.sh, or run "
        f"'python -m pypto._npu.kernel.build', or set {KERNEL_LIB_ENV}"
    )
