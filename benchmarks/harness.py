"""The benchmarks' one harness: time a thing (median of repeats), print the figures as a
table, and write them as JSON that later commits can be compared with.

    bench = Bench("run_tools", "every tool on a cached run")
    ms = bench.time(lambda: run.overview(), repeats=5)
    bench.row(run="dlrm", tool="overview_page", ms=ms, goal_ms=100)
    bench.finish()   # prints the table; writes benchmarks/results/run_tools.json

The JSON holds the machine, the commit and every row, so two commits' files diff row by row.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


class Bench:
    """One benchmark's rows, printed and written at the end."""

    def __init__(self, name: str, title: str) -> None:
        self.name = name
        self.title = title
        self.rows: list[dict[str, Any]] = []

    @staticmethod
    def time(fn: Callable[[], Any], repeats: int = 3) -> float:
        """The median wall time of ``repeats`` calls of ``fn``, in milliseconds."""
        times = []
        for _ in range(max(1, repeats)):
            started = time.perf_counter()
            fn()
            times.append((time.perf_counter() - started) * 1e3)
        return statistics.median(times)

    def row(self, **figures: Any) -> None:
        """One row of the table (its keys are the columns, in the order first seen)."""
        self.rows.append(figures)
        print("  " + ", ".join(f"{k}={_text(v)}" for k, v in figures.items()), flush=True)

    def finish(self, out: Path | None = None) -> Path:
        """Print the table and write the JSON (default ``benchmarks/results/<name>.json``)."""
        columns: dict[str, None] = {}
        for r in self.rows:
            columns.update(dict.fromkeys(r))
        cells = [[_text(r.get(c, "")) for c in columns] for r in self.rows]
        widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
        print(f"\n{self.title}")
        print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
        for row in cells:
            print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
        path = out or RESULTS / f"{self.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps({"benchmark": self.name, "title": self.title,
                                   "commit": _commit(), "machine": _machine(),
                                   "rows": self.rows}, indent=2) + "\n")
        os.replace(tmp, path)
        print(f"\nwrote {path}")
        return path


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _machine() -> dict[str, Any]:
    return {"python": sys.version.split()[0], "platform": platform.platform(),
            "cpus": os.cpu_count(), "load_average": os.getloadavg()[0]
            if hasattr(os, "getloadavg") else None}
