"""The real msprobe dumps the tests of this folder judge, made once per session
(``support.msprobe_dumps``); skipped where torch or msprobe cannot be imported."""

import pytest

from support.msprobe_dumps import make_dumps


@pytest.fixture(scope="session")
def dumps(tmp_path_factory):
    """{name: folder}: the dumps of ``support.msprobe_dumps.DUMPS``."""
    return make_dumps(tmp_path_factory.mktemp("msprobe"))
