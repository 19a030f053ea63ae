"""`python -m rltrack.cli`: the `rltrack` command."""

import sys

from rltrack.cli.entry import main

sys.exit(main())
