"""Reading and writing pypto's own files safely: the one place every reader and writer goes.

Readers (caches, case files, result files, manifests, dumps, ``.npy`` and ``.pt`` tensors) open
a path only when it is a regular file, checked without blocking (a FIFO or a device named like
the file would otherwise hang ``open`` or stream forever), bound what they read whole, and turn
every fault (too deep JSON included) into one :class:`FileFault`, a PyptoError whose text names
the file. Writers write a temporary file of an unpredictable name, created exclusively in the
target's folder (``tempfile.mkstemp``: a link planted in a shared folder is never followed),
then rename it over the target: a reader sees the old file or the new one, never a torn one.
"""

import contextlib
import hashlib
import json
import math
import os
import stat
import tempfile

import numpy as np

from ..error import FeError

__all__ = [
    "FileFault",
    "MAX_TEXT_BYTES",
    "open_regular",
    "read_text",
    "read_json",
    "parse_json",
    "npy_header",
    "check_npy_bytes",
    "atomic_writer",
    "file_sha256",
    "show",
]

# what a text file read whole (JSON, JSONL, CSV) may hold: far above any real case file, cache
# or results file, far below what would strain a host
MAX_TEXT_BYTES = 1 << 30


class FileFault(FeError):
    """A file pypto cannot read as what it should be: the text names the file and why."""

    def __init__(self, text):
        super().__init__(ValueError(text))


def open_regular(path, what, mode="rb", encoding=None):
    """``path`` opened for reading, if it is a regular file (after links); a FileFault when it
    is missing, unreadable or anything else (a FIFO, a device, a folder). Never blocks: the
    file is opened non-blocking and checked with fstat before anything is read."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise FileFault(f"cannot read {what} {path}: {exc}") from None
    try:
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            raise FileFault(f"cannot read {what} {path}: {_kind(kind)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode, encoding=encoding)
    except BaseException:
        os.close(fd)
        raise


def _kind(mode):
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return f"it is {name}"
    return "it is a special file"


def show(value, limit=60):
    """repr of a value read from a file, for a message: short, and safe for values nested
    deeper than repr can go."""
    try:
        text = repr(value)
    except RecursionError:
        text = f"<a {type(value).__name__} nested too deep to show>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_text(path, what, limit=MAX_TEXT_BYTES):
    """The UTF-8 text of the regular file ``path``, at most ``limit`` bytes (checked before
    reading); a FileFault otherwise."""
    with open_regular(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise FileFault(
                f"cannot read {what} {path}: {size} bytes, more than the {limit} read whole"
            )
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise FileFault(f"cannot read {what} {path}: {exc}") from None
    if len(data) > limit:  # it grew after the check
        raise FileFault(f"cannot read {what} {path}: more than the {limit} bytes read whole")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileFault(f"cannot read {what} {path}: not UTF-8 text ({exc})") from None


def parse_json(text, where):
    """``json.loads(text)``; a FileFault naming ``where`` for bad JSON and for JSON nested
    deeper than Python's parser goes (RecursionError)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise FileFault(f"{where}: JSON nested too deep") from None
    except ValueError as exc:
        raise FileFault(f"{where}: not JSON: {exc}") from None


def read_json(path, what, limit=MAX_TEXT_BYTES):
    """The JSON value of the regular file ``path`` (:func:`read_text`, :func:`parse_json`)."""
    return parse_json(read_text(path, what, limit), f"cannot read {what} {path}")


def npy_header(f, path):
    """(shape, fortran_order, dtype, data offset, bytes after the header) of the .npy file
    open as ``f`` (at its start), from its header alone: nothing the header claims is
    allocated. Check the claim with :func:`check_npy_bytes` before reading the data."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(f)
        else:
            raise ValueError(f"format version {version[0]}.{version[1]} (1.0 and 2.0 are read)")
        offset = f.tell()
        held = os.fstat(f.fileno()).st_size - offset
    except OSError as exc:
        raise FileFault(f"cannot read {path} as .npy: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the header parser's errors vary by kind
        # (ValueError, EOFError, SyntaxError, tokenize.TokenError, RecursionError...): each
        # means the same, not a .npy this can read
        raise FileFault(
            f"cannot read {path} as .npy: bad header ({type(exc).__name__}: {exc})"
        ) from None
    return shape, fortran, dtype, offset, held


def check_npy_bytes(path, shape, dtype, held):
    """A FileFault unless the ``held`` bytes after a .npy's header hold its ``dtype``
    ``shape``: a 228-byte file claiming 10^12 elements is refused before it is read."""
    needed = math.prod(shape) * dtype.itemsize
    if held < needed:
        raise FileFault(
            f"{path} holds {held} bytes after its header, but its {dtype} {list(shape)} "
            f"needs {needed} (truncated?)"
        )


def _umask():
    """The process's umask, read without changing it where Linux says it (else set back)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_writer(path, mode="w", encoding="utf-8", newline=None):
    """A file object whose contents replace ``path`` when the block ends without an exception
    (a temporary file from ``tempfile.mkstemp`` in ``path``'s folder, then ``os.replace``); on
    an exception the temporary file is removed and ``path`` is untouched. The new file gets
    the permissions an ordinary ``open`` would give it (0666 less the umask), not mkstemp's
    0600. OSError propagates: each writer names what it could not write."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(
        prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder
    )
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        binary = "b" in mode
        with os.fdopen(
            fd, mode, encoding=None if binary else encoding, newline=None if binary else newline
        ) as f:
            fd = None  # the file object owns it now
            yield f
        os.replace(temporary, path)
    except BaseException:
        if fd is not None:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def file_sha256(path):
    """The SHA-256 of a file's bytes, hex (case files' contents, kernel builds in verdict keys),
    read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
