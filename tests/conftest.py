"""Shared test set-up: which pypto is under test, and where the shared test helpers are.

The tests mirror the package: core/, cpu/, npu/, golden/ and cli/ hold the test files (no
``__init__.py``: pytest's default "prepend" import mode, so every test file's basename is unique
across the folders) and support/ the helpers they share, imported as ``support.<module>``. No
test module imports another test module.
"""

import os
import pathlib
import sys

import pytest

import pypto

TESTS = pathlib.Path(__file__).resolve().parent
SOURCE_TREE = TESTS.parent
# tests/ itself, so that ``from support.numerics import ...`` works from every folder (also in
# the pytest runs cpu/test_levels.py starts); never the checkout's root, which would put the
# source tree's pypto in front of an installed one
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


def pytest_report_header(config):
    return f"pypto {pypto.__version__} from {pathlib.Path(pypto.__file__).parent}"


def pytest_sessionstart(session):
    # Self-check verdicts (the AMX unit's, the NPU's) go to a folder of this run, never into
    # the user's cache: a test must neither read a verdict it did not make nor leave one.
    if "PYPTO_CACHE_DIR" not in os.environ:
        import atexit
        import shutil
        import tempfile

        folder = tempfile.mkdtemp(prefix="pypto-test-cache-")
        os.environ["PYPTO_CACHE_DIR"] = folder
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    # CI installs the sdist and must test that, not the source folder next to the tests.
    if os.environ.get("PYPTO_TEST_INSTALLED"):
        location = pathlib.Path(pypto.__file__).resolve()
        if location.parent == SOURCE_TREE / "pypto":
            raise RuntimeError(
                f"PYPTO_TEST_INSTALLED is set but pypto was imported from the "
                f"source tree ({location}), not from the installed package"
            )


@pytest.fixture(autouse=True)
def _fresh_options():
    """Every test starts from the default configuration and leaves it so (top-level settings
    live for the whole process)."""
    pypto.reset_options()
    yield
    pypto.reset_options()
