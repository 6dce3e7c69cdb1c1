"""``python -m stepscope``: the command line."""

import sys

from stepscope.cli import main

sys.exit(main())
