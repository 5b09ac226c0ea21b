"""``python -m idlib``: see idlib.cli (``python -m idlib --help``)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
