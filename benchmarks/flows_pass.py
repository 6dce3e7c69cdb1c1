"""The trace viewer's flows pass (``track_table.flows_of``) on one profile, or on every
profile under a folder (the fixtures): each host's table decoded and planned, then its flows
found, timed in process (wall, user and sys seconds, minor faults, RSS and peak growth: fresh
memory is what costs on a VM that hands freed memory back). ``--save FILE`` writes the flows
(npz) and ``--compare FILE`` checks them against a file written before, element for element
and in the same order: run it with one checkout's ``src`` (e.g. main's) to save, then with
another's to compare (``STEPSCOPE_PURE_PYTHON=1`` for the pure-Python twin).

    PYTHONPATH=src .venv/bin/python benchmarks/flows_pass.py PROFILE_OR_FOLDER \\
        [--save FILE | --compare FILE]

A profile of 200 MB or more is read under the machine's lock (``flock /work/big.lock``).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from stepscope.analysis.trace.trace_index import plan_tracks
from stepscope.analysis.trace.track_table import flows_of
from stepscope.formats.run_reader import load

SUFFIXES = (".xplane.pb", ".json.gz", ".pt.trace.json")


def _status_mb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) // 1024
    return 0


def timed(what: str, work: Any) -> Any:
    """``work()``, with one line of its costs printed."""
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    rss0, peak0 = _status_mb("VmRSS"), _status_mb("VmHWM")
    result = work()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    print(f"{what:10s} wall {time.perf_counter() - t0:6.2f} user {r1.ru_utime - r0.ru_utime:5.2f}"
          f" sys {r1.ru_stime - r0.ru_stime:5.2f} minflt {r1.ru_minflt - r0.ru_minflt:7d}"
          f" rss {rss0}->{_status_mb('VmRSS')} MB peak {peak0}->{_status_mb('VmHWM')} MB",
          flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--compare", type=Path)
    args = parser.parse_args()
    files = ([args.path] if args.path.is_file() else
             sorted(p for p in args.path.rglob("*") if p.name.endswith(SUFFIXES)))
    saved = np.load(args.compare) if args.compare else None
    found: dict[str, np.ndarray] = {}
    for path in files:
        try:
            run = timed("decode", lambda p=path: load(p, use_cache=False))
        except Exception as error:  # a fixture this reader does not take
            print(f"skipped {path}: {type(error).__name__}: {str(error)[:100]}")
            continue
        for host, table in run.hosts.items():
            plan = timed("plan", lambda t=table: plan_tracks(t))
            flows = timed("flows", lambda t=table, p=plan: flows_of(t, p))
            key = f"{path.relative_to(args.path) if path != args.path else path.name}::{host}"
            print(f"{len(flows[0])} flows (kinds {np.bincount(flows[2], minlength=2).tolist()})"
                  f" {key}")
            for i, array in enumerate(flows):
                found[f"{key}::{i}"] = np.asarray(array)
                if saved is not None and (f"{key}::{i}" not in saved.files
                                          or not np.array_equal(array, saved[f"{key}::{i}"])):
                    print(f"DIFFERENT: {key} array {i}")
                    return 1
    if saved is not None:
        if set(saved.files) != set(found):
            print(f"DIFFERENT: hosts {sorted(set(saved.files) ^ set(found))[:5]}")
            return 1
        print(f"the same flows as {args.compare} ({len(found) // 3} hosts)")
    if args.save:
        np.savez(args.save, **found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
