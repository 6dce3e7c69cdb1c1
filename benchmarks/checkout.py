"""Benchmarks measure the checkout they are in: importing this module puts that checkout's
``src`` first on the import path of this process and of every process it starts (the virtual
environment's editable install may point at another checkout: a worktree sharing main's
environment measured main's code in the servers and reports it started)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))
os.environ["PYTHONPATH"] = os.pathsep.join(
    dict.fromkeys([str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))
