"""Real msprobe dumps for the tests of ``tests/msprobe`` (``tests/msprobe/make_dump.py``, one
process per dump: msprobe's PrecisionDebugger keeps its first config), and what those tests
share to read, copy and judge them."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

MAKE_DUMP = pathlib.Path(__file__).resolve().parents[1] / "msprobe" / "make_dump.py"
# name: (level, task, steps)
DUMPS = {
    "mix": ("mix", "tensor", "bf16,fp16,forms"),
    "stats": ("L1", "statistics", "bf16"),
    "l0": ("L0", "tensor", "bf16"),
    "wide": ("L1", "tensor", "wide"),
}


def require_torch_and_msprobe():
    """Skip the calling test module when torch or msprobe cannot be imported; torch."""
    try:
        import torch
    except ImportError as exc:  # not installed, or installed and broken: skip alike
        pytest.skip(
            f"msprobe dumps need PyTorch, which cannot be imported: {exc}",
            allow_module_level=True,
        )
    try:
        import msprobe  # noqa: F401  (msprobe.pytorch itself is imported by make_dump.py)
    except ImportError as exc:
        pytest.skip(
            f"msprobe (pip install mindstudio-probe) cannot be imported: {exc}",
            allow_module_level=True,
        )
    return torch


def make_dumps(root):
    """{name: folder}: every dump of DUMPS under ``root``, made at once (one process each)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # at once on few cores; reproducible
    procs = {
        name: subprocess.Popen(
            [sys.executable, str(MAKE_DUMP), str(root / name), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=root,
            env=env,
        )
        for name, args in DUMPS.items()
    }
    outputs = {name: p.communicate(timeout=600)[0] for name, p in procs.items()}
    for name, p in procs.items():
        if p.returncode == 3:
            pytest.skip(f"msprobe or torch cannot be imported: {outputs[name].strip()[-300:]}")
        assert p.returncode == 0, f"making the {name} dump failed:\n{outputs[name][-3000:]}"
    return {name: root / name for name in DUMPS}


def dump_json(folder):
    (found,) = pathlib.Path(folder).rglob("dump.json")
    return found


def tensor_file(folder, name):
    return dump_json(folder).parent / "dump_tensor_data" / name


def copy_step(dump, step, tmp_path, name=None):
    """A copy of ``dump``'s step folder in ``tmp_path`` (to corrupt or edit)."""
    target = tmp_path / (name or f"step{step}")
    shutil.copytree(pathlib.Path(dump) / f"step{step}", target)
    return target


def cli(capsys, *args):
    """``pypto compare ARGS`` in this process: (exit code, stdout, stderr)."""
    from pypto._cli import main

    code = main(["compare", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err
