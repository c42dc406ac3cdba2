"""`python -m parbench` is the `parbench` command."""

import sys

from parbench.cli import main

# Guarded: spawned worker processes import the parent's __main__ module.
if __name__ == "__main__":
    sys.exit(main())
