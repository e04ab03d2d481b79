"""``python -m pypto.bench``: the benchmark (``main`` in pypto/bench/__init__.py)."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
