"""pypto._core.fileio: the readers refuse what is not a regular file without blocking, bound
what they read, and turn every fault into one PyptoError; the writer never follows a planted
link and never leaves a torn or temporary file (issue 42)."""

import os
import stat
import threading

import numpy as np
import pytest

import pypto
from pypto._core import fileio


def _returns_within(seconds, function, *args):
    """function(*args)'s exception or value, failing the test if it blocks (a FIFO's open)."""
    done = {}

    def run():
        try:
            done["value"] = function(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            done["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{function.__name__} blocked on {args[0]}"
    return done


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("reader", ["open_regular", "read_text", "read_json"])
def test_a_fifo_is_refused_without_blocking(tmp_path, reader):
    fifo = tmp_path / "cache.json"
    os.mkfifo(fifo)
    done = _returns_within(10, getattr(fileio, reader), str(fifo), "the cache")
    assert isinstance(done.get("error"), pypto.PyptoError), done
    assert "it is a FIFO, not a regular file" in str(done["error"])


def test_folders_missing_files_and_nul_bytes_are_one_error(tmp_path):
    for path, text in (
        (tmp_path, "it is a folder"),
        (tmp_path / "missing.json", "No such file"),
        (str(tmp_path) + "/a\0b", "cannot read the file"),
    ):
        with pytest.raises(pypto.PyptoError, match=text):
            fileio.read_json(str(path), "the file")


def test_the_size_is_checked_before_reading(tmp_path):
    path = tmp_path / "big.json"
    path.write_text("[" + "1," * 100 + "1]")
    assert len(fileio.read_json(str(path), "the file")) == 101
    with pytest.raises(pypto.PyptoError, match=r"bytes, more than the 64 read whole"):
        fileio.read_text(str(path), "the file", limit=64)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 100_000 + "]" * 100_000, "JSON nested too deep"),
        ("{not json", "not JSON"),
        (b"\xff\xfe{}", "not UTF-8 text"),
    ],
)
def test_bad_json_is_one_error(tmp_path, text, message):
    path = tmp_path / "x.json"
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    with pytest.raises(pypto.PyptoError, match=message):
        fileio.read_json(str(path), "the file")


def test_a_npy_header_claiming_more_than_the_file_holds_is_refused(tmp_path):
    path = tmp_path / "huge.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f2", "fortran_order": False, "shape": (10**12,)}
        )
        f.write(b"\0" * 100)
    with fileio.open_regular(str(path), "the tensor") as f:
        shape, fortran, dtype, offset, held = fileio.npy_header(f, str(path))
    assert shape == (10**12,) and dtype == np.float16 and held == 100
    with pytest.raises(pypto.PyptoError, match="needs 2000000000000"):
        fileio.check_npy_bytes(str(path), shape, dtype, held)
    fileio.check_npy_bytes(str(path), (50,), dtype, held)  # 100 bytes hold 50 fp16


def test_the_writer_replaces_the_file_whole_and_follows_no_planted_link(tmp_path):
    target = tmp_path / "cache.json"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    # the names a predictable writer would use: none of them may be followed
    for name in (f".cache.json.{os.getpid()}.tmp", "cache.json.tmp", ".cache.json.tmp"):
        os.symlink(victim, tmp_path / name)
    with fileio.atomic_writer(str(target)) as f:
        f.write("new")
    assert target.read_text() == "new" and not target.is_symlink()
    assert victim.read_text() == "precious"
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o666 & ~umask


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "rows.jsonl"
    target.write_text("old\n")
    before = set(os.listdir(tmp_path))
    with pytest.raises(RuntimeError, match="midway"):
        with fileio.atomic_writer(str(target)) as f:
            f.write("half")
            raise RuntimeError("midway")
    assert target.read_text() == "old\n" and set(os.listdir(tmp_path)) == before
    with fileio.atomic_writer(str(target), "wb") as f:
        f.write(b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01" and set(os.listdir(tmp_path)) == before
