"""What grouping host events into steps by context links (``analysis.step_groups``) costs,
next to the overview it is part of and to XProf's ``overview_page`` on the same profile.

Records a real TensorFlow custom training loop (tf.function, tf.data) of ``--steps`` steps
(kept under ``--workdir``, reused by later runs), then prints, median of ``--repeat`` runs in
this process, the time of: grouping alone (``grouped_step`` + ``region_ends``), stepscope's
whole per-host overview (``host_facts``, grouping included), and XProf's ``overview_page``
converter on a fresh copy of the file. A benchmark prints; it never fails on a timing.

    PYTHONPATH=src python benchmarks/step_groups.py --steps 500
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (this checkout's sources first, for every process started)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from workloads import TF_CUSTOM_LOOP  # noqa: E402 (after the path)


def _median(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _xprof_seconds(path: Path) -> float | None:
    code = ("import json, shutil, sys, tempfile, time\n"
            "from xprof.convert import raw_to_tool_data\n"
            "d = tempfile.mkdtemp(); f = shutil.copy(sys.argv[1], d)\n"
            "t = time.perf_counter()\n"
            "raw_to_tool_data.xspace_to_tool_data([f], 'overview_page', {})\n"
            "print(json.dumps(time.perf_counter() - t))\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        return None
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", default=".bench-profiles")
    args = parser.parse_args()

    logdir = Path(args.workdir) / f"tf_loop_{args.steps}"
    if not list(logdir.rglob("*.xplane.pb")):
        shutil.rmtree(logdir, ignore_errors=True)
        done = subprocess.run([sys.executable, "-c", TF_CUSTOM_LOOP, str(logdir),
                               str(args.steps)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(done.stderr[-2000:])
    path = sorted(logdir.rglob("*.xplane.pb"))[0]

    from stepscope.analysis.run_model.overview_page import host_facts
    from stepscope.analysis.run_model.step_groups import grouped_step
    from stepscope.analysis.run_model.steps import find_steps
    from stepscope.formats.run_reader import load

    table = next(iter(load(path, use_cache=False).hosts.values()))
    steps = find_steps(table)
    import numpy as np

    seed = np.where(np.isin(table.line, steps.lines), steps.event_step, -1).astype(np.int32)
    group_s = _median(lambda: grouped_step(table, seed), args.repeat)
    facts_s = _median(lambda: host_facts("host", table), args.repeat)
    with tempfile.TemporaryDirectory():
        xprof_s = _xprof_seconds(path)
    print(f"profile: {path.stat().st_size / 1e6:.1f} MB, {len(table):,} events, "
          f"{len(steps)} steps")
    print(f"{'grouping (step_groups)':<34}{group_s * 1e3:>10.1f} ms")
    print(f"{'stepscope host overview (all)':<34}{facts_s * 1e3:>10.1f} ms"
          f"   grouping = {100 * group_s / facts_s:.0f} % of it")
    if xprof_s is None:
        print("XProf overview_page: not installed")
    else:
        print(f"{'XProf overview_page':<34}{xprof_s * 1e3:>10.1f} ms"
              f"   stepscope / XProf = {facts_s / xprof_s:.2f}")


if __name__ == "__main__":
    main()
