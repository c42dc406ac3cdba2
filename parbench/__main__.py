"""`python -m parbench` is the `parbench` command."""

import sys

from parbench.cli import main

sys.exit(main())
