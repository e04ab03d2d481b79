"""Shared test set-up: which pypto is under test."""

import os
import pathlib

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
