"""Where pypto keeps its per-host verdicts (the NPU's and the AMX tile unit's self-checks):
``PYPTO_CACHE_DIR``, else ``$XDG_CACHE_HOME/pypto``, else ``~/.cache/pypto``.

A verdict only decides whether a self-checked unit is used; whoever can write this folder can
make pypto trust an unchecked one, so it must belong to the user (docs/npu.md)."""

import os
from pathlib import Path

__all__ = ["CACHE_DIR_ENV", "cache_dir"]

CACHE_DIR_ENV = "PYPTO_CACHE_DIR"


def cache_dir():
    return Path(
        os.environ.get(CACHE_DIR_ENV)
        or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
            "pypto",
        )
    )
