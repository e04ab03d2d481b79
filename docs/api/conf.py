"""Sphinx configuration of pypto's API reference (docs/api/).

Build it (warnings are errors, as in CI) with the ``sphinx-build`` script of an environment where
pypto and the ``docs`` extra are installed, e.g. ``pip install ".[docs]"`` then::

    sphinx-build -W --keep-going -b html docs/api build/api-html

autodoc imports the *installed* ``pypto``: this file puts nothing on ``sys.path``. Run the
``sphinx-build`` script (not ``python -m sphinx``, which puts the current folder first on
``sys.path``) or run from a folder other than the repository root, so that an unbuilt source
tree does not shadow the installed package.
"""

import importlib.util
import os
import pathlib

from sphinx.errors import ConfigError

import pypto

# CI documents the installed wheel: with PYPTO_TEST_INSTALLED set (as for the tests), a pypto
# imported from this checkout's source tree is an error, not a reference of unbuilt code.
SOURCE_TREE = pathlib.Path(__file__).resolve().parents[2]
if os.environ.get("PYPTO_TEST_INSTALLED"):
    location = pathlib.Path(pypto.__file__).resolve()
    if location.parent == SOURCE_TREE / "pypto":
        raise ConfigError(
            f"PYPTO_TEST_INSTALLED is set but pypto was imported from the source tree "
            f"({location}), not from the installed package"
        )

project = "pypto"
author = "pypto contributors"
copyright = "pypto contributors"
release = version = pypto.__version__

print(f"[pypto docs] documenting pypto {pypto.__version__} from {os.path.dirname(pypto.__file__)}")

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

# The docstrings are reST with numpydoc sections (Parameters / Returns / Raises / Attributes).
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "none"  # the code has no annotations; the docstrings say the types
autoclass_content = "class"  # the docstrings are on the classes; an inherited __init__ is not ours

exclude_patterns = ["_build"]
html_theme = "alabaster"
html_title = f"pypto {release} API reference"
html_static_path = []

# pypto.torch imports torch; where torch is not installed its page says so instead of failing.
HAVE_TORCH = importlib.util.find_spec("torch") is not None
NO_TORCH_PAGE = """\
pypto.torch
===========

``pypto.torch`` needs PyTorch (``pip install ".[torch]"``), which was not installed when this
reference was built: rebuild it in an environment with torch to see this page.
"""


def _torch_page(app, docname, source):
    if docname == "torch" and not HAVE_TORCH:
        source[0] = NO_TORCH_PAGE


def _no_builtin_docstring(app, what, name, obj, options, lines):
    # a constant (a tuple, a str, a dict) has no docstring of its own: autodoc would show its
    # type's ("Built-in immutable sequence. ...")
    type_doc = (type(obj).__doc__ or "").strip()
    if what in ("data", "attribute") and type_doc and lines:
        if lines[0].strip() == type_doc.splitlines()[0].strip():
            lines[:] = []


def setup(app):
    app.connect("source-read", _torch_page)
    app.connect("autodoc-process-docstring", _no_builtin_docstring)
