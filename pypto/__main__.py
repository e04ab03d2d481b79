"""``python -m pypto``: the command line (pypto/_cli/)."""

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
