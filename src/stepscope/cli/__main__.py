"""``python -m stepscope.cli``: the command line, as ``stepscope``."""

import sys

from stepscope.cli import main

sys.exit(main())
