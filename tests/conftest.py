"""Shared test set-up: which pypto is under test."""

import os
import pathlib

import pytest

import pypto

SOURCE_TREE = pathlib.Path(__file__).resolve().parent.parent


def pytest_report_header(config):
    return f"pypto {pypto.__version__} from {pathlib.Path(pypto.__file__).parent}"


def pytest_sessionstart(session):
    # CI installs the sdist and must test that, not the source folder next to the tests.
    if os.environ.get("PYPTO_TEST_INSTALLED"):
        location = pathlib.Path(pypto.__file__).resolve()
        if location.parent == SOURCE_TREE / "pypto":
            raise RuntimeError(f"PYPTO_TEST_INSTALLED is set but pypto was imported from the "
                               f"source tree ({location}), not from the installed package")


@pytest.fixture(autouse=True)
def _fresh_options():
    """Every test starts from the default configuration and leaves it so (top-level settings
    live for the whole process)."""
    pypto.reset_options()
    yield
    pypto.reset_options()
