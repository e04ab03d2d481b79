"""The README's main command and every example run as written and report success."""

import pathlib
import subprocess
import sys

import pytest

from support.slowdown import limit

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def _run(args):
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=limit(300),
        cwd=ROOT / "examples",
    )


def test_main_command_checks_and_passes():
    done = _run(["-m", "pypto", "--threads", "2"])
    assert done.returncode == 0, done.stderr
    assert "check against the float64 reference: passed" in done.stdout
    assert "spec example" in done.stdout and "ResNet 3x3 layer" in done.stdout


def test_console_script_runs_the_installed_package():
    import shutil

    script = shutil.which("pypto", path=str(pathlib.Path(sys.executable).parent))
    assert script, "the pypto console script is not installed next to this Python"
    done = subprocess.run(
        [script, "info"], capture_output=True, text=True, timeout=limit(120), cwd=ROOT
    )  # from the source folder: must still run the installed one
    assert done.returncode == 0, done.stderr
    assert "cpu kernel: ISA" in done.stdout


def test_main_command_rejects_bad_threads():
    done = _run(["-m", "pypto", "--threads", "0"])
    assert done.returncode == 2
    assert "num_threads" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_example_runs(example, tmp_path):
    text = example.read_text()
    if "torch" in text:
        pytest.importorskip("torch")
    if "msprobe" in text:
        pytest.importorskip("msprobe.pytorch", reason="mindstudio-probe is not installed")
    args = [str(tmp_path / "out")] if example.name == "torch_msprobe_dump.py" else []
    done = _run([str(example), *args])
    assert done.returncode == 0, done.stdout + done.stderr


def _shown_examples(doc):
    """{example path: the code block shown after its ``<!-- examples/NAME.py -->`` marker}."""
    shown, lines = {}, doc.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("<!-- examples/") and line.rstrip().endswith("-->"):
            name = line.strip()[5:-4].strip()
            assert lines[i + 1].startswith("```python"), f"{doc.name}: no code block after {name}"
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            shown[name] = "".join(lines[i + 2 : end])
    return shown


def test_the_torch_recipes_are_the_examples_the_suite_runs():
    """docs/torch.md shows each recipe as the example script, verbatim: what readers copy is
    what test_example_runs ran."""
    shown = _shown_examples(ROOT / "docs" / "torch.md")
    assert len(shown) >= 6
    for name, code in shown.items():
        assert (ROOT / name).read_text() == code, f"docs/torch.md shows another {name}"
