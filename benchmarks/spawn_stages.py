"""A fresh ``stepscope serve``, stage by stage: from spawning the process to the server
answering (``/api/runs``), to the trace viewer's tool data, to its first full-width window
with events (asked as the page asks: a coarse answer is asked again). Each stage's wall time
from the spawn and the server's CPU time (user + system, all threads) so far, medians of
``--repeats`` fresh servers on an empty cache; with ``--base-src DIR``, the same for that
source tree (e.g. main's ``src``), the two interleaved run by run so that both meet the same
load (on a busy machine, compare the ratios and the CPU, not the walls).

Byte-code: as this environment has it (``PYTHONDONTWRITEBYTECODE`` set: our modules are
compiled at every start), and with ``--pyc`` as an installed package has it (compiled once
into a private ``PYTHONPYCACHEPREFIX`` by an untimed first server).

    STEPSCOPE_BENCH_DIR=/work/bench-profiles .venv/bin/python benchmarks/spawn_stages.py \\
        [PROFILE] [--repeats 9] [--base-src ../main/src] [--pyc]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import checkout
from load_and_overview import _free_port
from load_and_overview import _get_json as _get

STAGES = ("listen", "data", "window")


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (NaN if unknown)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    return sum(int(f) for f in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def one_server(src: Path, logdir: Path, cache: Path, pycache: Path | None
               ) -> dict[str, float]:
    """Spawn a server of ``src`` on ``logdir`` (empty cache ``cache``): each stage's wall
    seconds from the spawn, and its CPU seconds so far (``<stage>_cpu``)."""
    shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(src), "STEPSCOPE_CACHE_DIR": str(cache)}
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    port = _free_port()
    base = f"http://127.0.0.1:{port}/api/"
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", "serve", "--logdir",
                             str(logdir), "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out: dict[str, float] = {}

    def stage(name: str) -> None:
        out[name] = time.perf_counter() - started
        out[name + "_cpu"] = _cpu_s(proc.pid)

    def poll(route: str, **params: str) -> Any:
        query = urllib.parse.urlencode({"run": "real", **params})
        while True:
            status, body = _get(f"{base}{route}?{query}")
            if status == 200:
                return body
            if proc.poll() is not None:
                raise RuntimeError(f"the server of {src} exited")
            time.sleep(0.005 if status == 0 else 0.05)

    try:
        while _get(base + "runs")[0] != 200:
            if proc.poll() is not None:
                raise RuntimeError(f"the server of {src} exited")
            time.sleep(0.005)
        stage("listen")
        meta = poll("data", tool="trace_viewer")
        stage("data")
        window: dict[str, Any] = {"coarse": True}
        while window.get("coarse"):
            window = poll("trace/window", start_ns="0", end_ns=str(meta["span_ns"]),
                          width="2000")
        stage("window")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return out


def measure(profile: Path, repeats: int, base_src: Path | None, pyc: bool
            ) -> dict[str, dict[str, float]]:
    """Medians per source tree ("ours", and "base" with ``base_src``), interleaved."""
    trees = {"ours": checkout.SRC}
    if base_src is not None:
        trees["base"] = base_src.resolve()
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-spawn-") as tmp:
        logdir = Path(tmp) / "logs"
        run = logdir / "plugins" / "profile" / "real"
        run.mkdir(parents=True)
        (run / profile.name).symlink_to(profile.resolve())
        pycaches = {name: Path(tmp) / f"pyc-{name}" if pyc else None for name in trees}
        for name, src in trees.items():  # untimed: byte-code written (--pyc), files cached
            one_server(src, logdir, Path(tmp) / f"cache-{name}", pycaches[name])
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(repeats):
            for name, src in trees.items():
                runs[name].append(one_server(src, logdir, Path(tmp) / f"cache-{name}",
                                             pycaches[name]))
    return {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
            for name, rs in runs.items()}


def default_profile() -> Path:
    """The 10 MB TensorFlow profile of ``$STEPSCOPE_BENCH_DIR`` (see tf_profile.py)."""
    bench = Path(os.environ.get("STEPSCOPE_BENCH_DIR", ".bench-profiles"))
    found = sorted(bench.glob("gen-10MB/logs/plugins/profile/*/*.xplane.pb"))
    if not found:
        raise SystemExit(f"no 10 MB profile under {bench}/gen-10MB; name one")
    return found[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", nargs="?", type=Path)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--base-src", type=Path)
    parser.add_argument("--pyc", action="store_true",
                        help="byte-code compiled once, as an installed package has it")
    args = parser.parse_args()
    profile = args.profile or default_profile()
    result = measure(profile, args.repeats, args.base_src, args.pyc)
    print(f"fresh `stepscope serve` on {profile} ({profile.stat().st_size / 2**20:.1f} MB), "
          f"byte-code {'kept' if args.pyc else 'not kept'}, medians of {args.repeats}:")
    for name, figures in result.items():
        print(f"  {name:5s} " + "   ".join(
            f"{stage} {figures[stage]:.3f} s (CPU {figures[stage + '_cpu']:.3f})"
            for stage in STAGES))
    if "base" in result:
        print("  ratio " + "   ".join(
            f"{stage} {result['ours'][stage] / result['base'][stage]:.2f}x "
            f"(CPU {result['ours'][stage + '_cpu'] / result['base'][stage + '_cpu']:.2f}x)"
            for stage in STAGES))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
