"""Per-host caches of self-check verdicts (the NPU kernel's, the AMX tile unit's): one JSON
file each in pypto's cache folder, ``PYPTO_CACHE_DIR``, else ``$XDG_CACHE_HOME/pypto``, else
``~/.cache/pypto``, mapping a digest of what a verdict holds for to its record.

A verdict only decides whether a self-checked unit is used; whoever can write the folder can
make pypto trust an unchecked one, so it must belong to the user (docs/npu.md). A file that is
missing, not a regular file, too large or not a JSON object is no verdict (the check runs
again); one that cannot be written only means the check runs again in the next process.
"""

import hashlib
import json
import os
import warnings
from pathlib import Path

from ..error import PyptoError
from .fileio import atomic_writer, read_json

__all__ = ["CACHE_DIR_ENV", "VerdictCache"]

CACHE_DIR_ENV = "PYPTO_CACHE_DIR"


class VerdictCache:
    """The verdicts of one self-check, in ``filename``; ``what`` names it in messages."""

    LIMIT = 16 << 20  # bytes: a few hundred verdicts take kilobytes

    def __init__(self, filename, what):
        self.filename, self.what = filename, what

    @property
    def path(self):
        base = os.environ.get(CACHE_DIR_ENV) or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
            "pypto",
        )
        return Path(base) / self.filename

    @staticmethod
    def key_text(key):
        """The digest a record is stored under: of ``key``'s JSON, keys sorted."""
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()

    def load(self):
        """{key digest: record}; {} for a file that holds no verdicts (see the module)."""
        try:
            stored = read_json(self.path, f"the {self.what} verdict cache", self.LIMIT)
        except PyptoError:
            return {}
        return stored if isinstance(stored, dict) else {}

    def get(self, key):
        """The record stored for ``key`` (unchecked: the caller checks its fields), or None."""
        return self.load().get(self.key_text(key))

    def store(self, key, record):
        """Add one record (the file replaced atomically); a warning if it cannot be written."""
        path = self.path
        stored = self.load()
        stored[self.key_text(key)] = record
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_writer(path) as f:
                f.write(json.dumps(stored, indent=1, sort_keys=True))
        except OSError as exc:
            warnings.warn(
                f"pypto: the {self.what} self-check's verdict could not be cached in {path}: {exc}",
                RuntimeWarning,
                stacklevel=3,
            )
