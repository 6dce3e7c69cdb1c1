"""The size of a virtual environment on disk, and its largest installed packages.

    python scripts/venv_size.py .venv-demo [--goal-mb 300] [--json FILE]

`make demo` prints it for the core install (the goal is at most 300 MB; the environment with
the reference frameworks that `make test` installs is over 3 GB). Sizes are in MB (10^6
bytes, as `du --si` and pip speak) of the files themselves, links not followed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def tree_bytes(root: Path) -> int:
    """Bytes of every regular file under ``root`` (symbolic links not followed)."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                total += os.lstat(path).st_size
    return total


def packages(venv: Path) -> list[tuple[str, str, int]]:
    """(name, version, bytes) of each distribution installed in ``venv``, largest first,
    asked of the venv's own Python (its importlib.metadata lists each one's files)."""
    script = (
        "import importlib.metadata as m, json, os\n"
        "out = []\n"
        "for d in m.distributions():\n"
        "    size = 0\n"
        "    for f in d.files or []:\n"
        "        p = str(f.locate())\n"
        "        if os.path.isfile(p) and not os.path.islink(p):\n"
        "            size += os.lstat(p).st_size\n"
        "    out.append((d.metadata['Name'], d.version, size))\n"
        "print(json.dumps(out))\n")
    python = venv / "bin" / "python"
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True,
                          check=True)
    rows = [(str(n), str(v), int(s)) for n, v, s in json.loads(done.stdout)]
    return sorted(rows, key=lambda row: -row[2])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("venv", type=Path)
    parser.add_argument("--goal-mb", type=float, default=300.0)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    if not (args.venv / "bin" / "python").exists():
        print(f"{args.venv} is not a virtual environment", file=sys.stderr)
        return 2
    total = tree_bytes(args.venv)
    rows = packages(args.venv)
    mb = total / 1e6
    verdict = "within" if mb <= args.goal_mb else "OVER"
    print(f"{args.venv}: {mb:.0f} MB on disk, {len(rows)} packages "
          f"({verdict} the {args.goal_mb:.0f} MB goal)")
    for name, version, size in rows[:args.top]:
        print(f"  {size / 1e6:8.1f} MB  {name} {version}")
    if args.json:
        args.json.write_text(json.dumps({"venv": str(args.venv), "bytes": total,
                                         "packages": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
