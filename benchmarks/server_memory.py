"""Where a fresh server's memory peaks while it opens a one-host profile, stage by stage: the
store and trace viewer a ``stepscope serve`` runs (``web.store.RunStore``, ``web.trace``),
in this process, on an empty cache, the first exact window asked as the page asks. A thread
samples the process's anonymous memory (``RssAnon``: the kernel keeps no peak of it) every
2 ms and files each sample under the stages running then: the table's read (``load``), its
mapping from the cache (``map``), the coarse overview, the flows' join (a thread beside the
overview), the per-track table, the full index's build, the run model's build and save
(``-``: none of those, e.g. the model's kept results). Printed per stage: its peak beyond
the process's memory before the store started, ÷ the file's size; each stage's seconds and
its memory at its end; then the peak of resident memory (``VmHWM``, pages of mapped cache
files included) and what is kept once all is built.

    .venv/bin/python benchmarks/server_memory.py PROFILE

A profile of 500 MB or more must be measured under the machine's lock (``flock``), capped
(``prlimit --as``), as every such run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (this checkout's src first)

FIELDS = ("RssAnon", "RssFile", "VmHWM", "VmRSS")


def status() -> dict[str, float]:
    """This process's memory figures, MB."""
    out: dict[str, float] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in FIELDS:
                out[key] = int(value.split()[0]) / 1024
    return out


class Stages:
    """The stages running now, and the peak anonymous memory seen under each combination."""

    def __init__(self) -> None:
        self.running: list[str] = []
        self.peaks: dict[str, float] = {}
        self.ends: list[tuple[str, float, float]] = []
        self.lock = threading.Lock()
        self.done = threading.Event()

    def sample(self) -> None:
        while not self.done.is_set():
            anon = status()["RssAnon"]
            with self.lock:
                key = "+".join(self.running) or "-"
            self.peaks[key] = max(self.peaks.get(key, 0.0), anon)
            time.sleep(0.002)

    def wrap(self, module: Any, name: str, label: str) -> None:
        """``module.name`` marked as stage ``label`` while it runs."""
        inner: Callable[..., Any] = getattr(module, name)

        def marked(*args: Any, **kwargs: Any) -> Any:
            with self.lock:
                self.running.append(label)
            t = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                with self.lock:
                    self.running.remove(label)
                self.ends.append((label, time.perf_counter() - t, status()["RssAnon"]))

        setattr(module, name, marked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path, help="a one-host profile (.xplane.pb)")
    args = parser.parse_args()
    path: Path = args.profile
    size = path.stat().st_size / 2**20
    tmp = tempfile.mkdtemp(prefix="stepscope-server-memory-")
    os.environ["STEPSCOPE_CACHE_DIR"] = str(Path(tmp) / "cache")
    from stepscope.run import storage
    from stepscope.web import store, trace

    base = status()
    stages = Stages()
    threading.Thread(target=stages.sample, daemon=True).start()
    stages.wrap(store, "load_file", "load")
    stages.wrap(trace, "map_table", "map")  # before the overview where memory is short
    stages.wrap(storage, "map_table", "map")  # else by the index's build
    stages.wrap(trace, "TraceOverview", "overview")
    stages.wrap(trace, "flows_of", "flows")
    stages.wrap(trace, "TrackTable", "tracktable")
    stages.wrap(trace, "index_for", "index")
    stages.wrap(store, "build_run_model", "model")
    stages.wrap(store, "save_model", "savemodel")
    runs = store.RunStore()
    t0 = time.perf_counter()
    state = runs.get(path.parent)
    while state.early is None and state.state == "loading":
        time.sleep(0.01)
    run = state.early
    if run is None:
        sys.exit(f"{path}: not a one-host profile ({state.error or state.state})")
    while True:  # the page's first window, asked again while it is coarse
        try:
            meta = trace.trace_viewer_data(run, None)
            answer = trace.answer(trace.trace_index(run, None, coarse=True), "window", {
                "start_ns": "0", "end_ns": str(meta["span_ns"]), "width": "2000"})
            if not answer.get("coarse"):
                break
        except trace.IndexPending:
            pass
        time.sleep(0.02)
    first = time.perf_counter() - t0
    future = run.started(("trace_index", meta["host"]))
    if future is not None:
        future.result()
    while state.state == "loading":
        time.sleep(0.05)
    time.sleep(0.5)
    stages.done.set()
    end = status()
    runs.close()
    print(f"{path} ({size:,.1f} MB): first window with events {first:.2f} s")
    print("  anonymous peak by stage, beyond the start ÷ file:")
    for key, peak in sorted(stages.peaks.items(), key=lambda kv: -kv[1]):
        print(f"    {key:28s} {peak:9.1f} MB  {(peak - base['RssAnon']) / size:6.2f}x")
    print("  stages (seconds, anonymous MB at the end):")
    for label, seconds, anon in stages.ends:
        print(f"    {label:12s} {seconds:8.3f} s {anon:9.1f} MB")
    print(f"  resident peak (VmHWM, mapped pages included) beyond the start ÷ file: "
          f"{(end['VmHWM'] - base['VmHWM']) / size:.2f}x")
    print(f"  kept: anonymous {end['RssAnon']:.1f} MB ({end['RssAnon'] / size:.2f}x in all, "
          f"{(end['RssAnon'] - base['RssAnon']) / size:.2f}x beyond the start), pages of "
          f"mapped files {end['RssFile']:.1f} MB")


if __name__ == "__main__":
    main()
