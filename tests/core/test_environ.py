"""pypto._core.environ.getenv: the live environment, as os.environ.get reads it."""

import os

import pytest

from pypto._core.environ import getenv

NAME = "PYPTO_TEST_ENVIRON_NAME"


def test_getenv_sees_every_change_through_os_environ(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)
    assert getenv(NAME) is None
    monkeypatch.setenv(NAME, "16")
    assert getenv(NAME) == "16" == os.environ.get(NAME)
    monkeypatch.setenv(NAME, "")
    assert getenv(NAME) == ""  # set but empty is not "not set"
    monkeypatch.setenv(NAME, "väl ue")  # non-ASCII round-trips as os.environ decodes it
    assert getenv(NAME) == "väl ue"
    monkeypatch.delenv(NAME)
    assert getenv(NAME) is None


def test_getenv_follows_a_replaced_os_environ(monkeypatch):
    monkeypatch.setattr(os, "environ", {NAME: "3"})
    assert getenv(NAME) == "3"
    assert getenv("PATH") is None


@pytest.mark.parametrize("value", ["7", None])
def test_omp_num_threads_is_read_on_every_call(monkeypatch, value):
    import pypto
    from pypto._core import options

    if value is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        expected = min(options.default_threads()[0], options.MAX_THREADS)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", value)
        expected = int(value)
    with pypto.options(num_threads=None):
        assert options.get_num_threads() == expected
