"""How fast stepscope opens a profile and computes its overview, next to XProf's overview_page.

For profiles of increasing size (by default about 1 MB, 10 MB and at least 100 MB), it prints
side by side, from one run:

1. XProf: ``raw_to_tool_data.xspace_to_tool_data([file], "overview_page", {})``, the work
   TensorBoard's Profile tab does to show its overview page. XProf writes cache files next to
   the profile, so every run gets a fresh copy of the file in an empty directory.
2. stepscope, cold: ``overview_dict(file, use_cache=False)`` with the cache turned off
   (``STEPSCOPE_NO_CACHE=1`` and an empty ``STEPSCOPE_CACHE_DIR``): parse, analyse, summarise.
3. stepscope, warm: ``overview_dict(file)`` in a new process, after one earlier process has
   filled an otherwise empty cache directory (the second open of a profile: a result-cache hit).
   The same process then times ``overview(load(file)).to_dict()``, which maps the cached
   event tables and recomputes the overview without the result cache ("tables cached").

Every measurement runs in a fresh subprocess that reports its own peak RSS (``ru_maxrss``)
and its RSS right after its imports; "added" memory is the difference (what the work itself
cost), "peak" the process total. Only the measured call is timed, never the imports. Each
timing is repeated (3 times by default) and the median kept; XProf runs once only on a profile
where its first run takes longer than ``--xprof-slow`` seconds, and the table says so. The
operating system's page cache is warm for every run alike: the file was just written or read.

The goals, reported as MET or MISSED (a benchmark prints; it never fails on a timing):
stepscope cold <= 0.5x XProf's time; stepscope's added peak memory <= 2x the file size;
warm <= 100 ms.

Profiles are made with stepscope's own capture: a Python-heavy loop of "train" steps, each
``Trace("train", step_num=i, _r=1)`` around nested annotations and thousands of Python calls,
recorded with the Python tracer on (``python_tracer_level=1``). They are kept under
``--workdir`` (default ``$STEPSCOPE_BENCH_DIR``, else ``.bench-profiles/``) and reused by
later runs. ``--profile FILE`` (repeatable) benchmarks given ``.xplane.pb`` files instead (or
as well, with ``--sizes``).

Two start-up figures (``--startup``, also in a full run):

4. CLI fixed cost: ``stepscope report`` on a tiny profile (a few events) whose answer is
   cached, in fresh processes, beside ``python -c pass`` and, with ``--base-src DIR`` (e.g.
   ``git archive HEAD~1 src | tar -x -C DIR``, compiled extensions copied in), the same command
   on another source tree. Byte-code is compiled once into a private folder first, as an
   installed package has it. CPU time (user + system) is the figure: on a shared machine it
   varies far less than wall time, which is printed beside it.
5. A fresh ``stepscope serve`` on the 10 MB profile: from starting the process to its answer of
   the trace viewer's first window (start-up, opening the run and the window together).

Memory is also given beyond a tiny profile's peak (what the file's size costs, not the
interpreter, NumPy and the code), as the goals count it. A profile of 500 MB or more is loaded
only while holding ``flock /work/big.lock`` (one such process machine-wide), and XProf runs on
it with an address-space cap (``--xprof-cap-gb``), reported as "ran out of N GB".

Run from the repository root::

    .venv/bin/python benchmarks/load_and_overview.py            # 1, 10 and >= 100 MB
    .venv/bin/python benchmarks/load_and_overview.py --quick    # 1 and 10 MB only
    .venv/bin/python benchmarks/load_and_overview.py --profile run/host.xplane.pb
    .venv/bin/python benchmarks/load_and_overview.py --json     # one JSON object
    .venv/bin/python benchmarks/load_and_overview.py --startup  # CLI and serve start-up only
    .venv/bin/python benchmarks/load_and_overview.py --quick --tf   # + the >= 100 MB TF profile
    .venv/bin/python benchmarks/load_and_overview.py --tf-steps --no-xprof  # + TF with steps
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (this checkout's sources first, for every process started)

# Profile sizes (MB) made by default, and by --quick.
DEFAULT_SIZES_MB = (1.0, 10.0, 100.0)
QUICK_SIZES_MB = (1.0, 10.0)
DEFAULT_WORKDIR = os.environ.get("STEPSCOPE_BENCH_DIR") or ".bench-profiles"
REPEATS = 3
# Past this many seconds for its first run, XProf is not run again on that profile.
XPROF_SLOW_S = 60.0

# The goals.
GOAL_COLD_OVER_XPROF = 0.5
GOAL_PEAK_OVER_FILE = 2.0
GOAL_WARM_MS = 100.0

# The generated workload: each step runs PHASES, each phase one block of LAYERS layers of
# LEAVES leaf calls (about 210 recorded events a step). Bump GENERATOR_VERSION when the
# workload changes, so that cached profiles are made again.
GENERATOR_VERSION = 1
PHASES = ("data", "forward", "backward", "optimizer")
LAYERS = 5
LEAVES = 8
# File bytes per step, a first guess refined from each profile made; and a bound on the events
# recorded per step, for max_events (doubled, and the profile made again, if events drop).
BYTES_PER_STEP_GUESS = 3_000.0
EVENTS_PER_STEP_BOUND = 400

_RESULT_MARK = "@@load_and_overview@@ "

# Profiles at least this large are loaded holding BIG_LOCK (one such process machine-wide),
# and XProf runs on them under an address-space cap.
BIG_BYTES = 500 * 10**6
BIG_LOCK = "/work/big.lock"
XPROF_CAP_GB = 10.0
CLI_REPEATS = 10
GOAL_CLI_OVER_BASE = 0.5
GOAL_SERVE_FIRST_WINDOW_S = 0.5


def _say(text: str, end: str = "\n") -> None:
    """Progress, on stderr (stdout holds the table or the JSON)."""
    print(text, end=end, file=sys.stderr, flush=True)


# --- the generated workload --------------------------------------------------------------------


def _leaf(x: int) -> int:
    return (x * 31 + 7) & 0xFFFF


def _layer(x: int) -> int:
    for _ in range(LEAVES):
        x = _leaf(x)
    return x


def _block(x: int) -> int:
    for _ in range(LAYERS):
        x = _layer(x)
    return x


def _child_generate(logdir: str, steps: int, max_events: int) -> dict[str, Any]:
    """Record ``steps`` training steps with the Python tracer on; write one profile."""
    import warnings

    import stepscope

    options = stepscope.ProfilerOptions(python_tracer_level=1, counter_interval_ms=0,
                                        max_events=max_events)
    report_every = max(steps // 10, 1)
    x = 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", stepscope.DroppedEventsWarning)
        started = time.perf_counter()
        stepscope.start(logdir, options=options)
        for i in range(steps):
            with stepscope.Trace("train", step_num=i, _r=1):
                for phase in PHASES:
                    with stepscope.Trace(phase):
                        x = _block(x)
            if (i + 1) % report_every == 0:
                _say(f"    recorded {i + 1:,}/{steps:,} steps")
        path = stepscope.stop()
        elapsed = time.perf_counter() - started
    dropped = [str(w.message) for w in caught
               if issubclass(w.category, stepscope.DroppedEventsWarning)]
    if path is None:
        raise RuntimeError("stepscope.stop() wrote no profile")
    return {"path": str(path), "bytes": Path(path).stat().st_size, "steps": steps,
            "dropped": dropped, "seconds": elapsed}


# --- measurements, one per child process -------------------------------------------------------


def _maxrss_mb() -> float:
    """This process's peak RSS so far, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS


def _xprof_steps(tool_data: Any) -> int | None:
    """How many steps XProf's overview_page JSON lists (its step table's rows), or None."""
    if isinstance(tool_data, tuple):
        tool_data = tool_data[0]
    try:
        tables = json.loads(tool_data)
    except (TypeError, ValueError):
        return None
    for table in tables if isinstance(tables, list) else []:
        cols = table.get("cols") if isinstance(table, dict) else None
        if cols and cols[0].get("id") == "stepnum":
            return len(table.get("rows") or [])
    return None


def _child_xprof(path: str) -> dict[str, Any]:
    from xprof.convert import raw_to_tool_data

    baseline = _maxrss_mb()
    started = time.perf_counter()
    data = raw_to_tool_data.xspace_to_tool_data([path], "overview_page", {})
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "baseline_mb": baseline, "peak_mb": _maxrss_mb(),
            "steps": _xprof_steps(data)}


def _timed_overview(path: str, use_cache: bool) -> dict[str, Any]:
    """One ``overview_dict`` call, timed, with the memory it took."""
    from stepscope.run.loader import overview_dict

    baseline = _maxrss_mb()
    started = time.perf_counter()
    result = overview_dict(path, use_cache=use_cache)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "baseline_mb": baseline, "peak_mb": _maxrss_mb(),
            "steps": result["steps"]["count"]}


def _child_cold(path: str) -> dict[str, Any]:
    """An open with no cache: parse and compute everything."""
    return _timed_overview(path, use_cache=False)


def _child_fill(path: str) -> dict[str, Any]:
    """The first open with the cache on: computes everything and fills the cache."""
    return _timed_overview(path, use_cache=True)


def _child_warm(path: str) -> dict[str, Any]:
    """The cached second open (result cache), then the overview from the cached tables."""
    from stepscope.analysis import overview
    from stepscope.formats.run_reader import load
    from stepscope.run.loader import overview_dict

    baseline = _maxrss_mb()
    started = time.perf_counter()
    result = overview_dict(path)
    seconds = time.perf_counter() - started
    peak = _maxrss_mb()

    started = time.perf_counter()
    profile = load(path)
    from_tables = overview(profile).to_dict()
    tables_seconds = time.perf_counter() - started
    return {"seconds": seconds, "baseline_mb": baseline, "peak_mb": peak,
            "steps": result["steps"]["count"],
            "tables_seconds": tables_seconds, "tables_peak_mb": _maxrss_mb(),
            "tables_steps": from_tables["steps"]["count"],
            "events": sum(len(table) for table in profile.hosts.values())}


CHILDREN: dict[str, Callable[[str], dict[str, Any]]] = {
    "xprof": _child_xprof, "cold": _child_cold, "fill": _child_fill, "warm": _child_warm,
}


def _run_child(args: Sequence[str], env: dict[str, str] | None = None,
               quiet: bool = True, big: bool = False, cap_gb: float | None = None
               ) -> dict[str, Any]:
    """Run this script as a child with ``args``; return the result it prints. ``big``: hold
    BIG_LOCK while it runs; ``cap_gb``: cap its address space (a run out of it is reported
    as ``{"out_of_gb": cap_gb}``)."""
    command = [sys.executable, os.path.abspath(__file__), *args]
    if cap_gb is not None:
        command = ["prlimit", f"--as={int(cap_gb * 1e9)}", *command]
    if big:
        command = ["flock", BIG_LOCK, *command]
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}
    proc = subprocess.run(command, env=full_env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE if quiet else None, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith(_RESULT_MARK):
            result: dict[str, Any] = json.loads(line[len(_RESULT_MARK):])
            return result
    detail = (proc.stderr or "")[-3000:] if quiet else ""
    if cap_gb is not None and ("MemoryError" in detail or "bad_alloc" in detail
                               or proc.returncode < 0):
        return {"out_of_gb": cap_gb}
    raise RuntimeError(f"child {' '.join(args)} exited {proc.returncode} without a result\n"
                       f"{detail}")


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(run[key] for run in runs))


def _summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median time, peak and added memory of a measurement's runs, and the runs themselves."""
    return {
        "runs": len(runs),
        "seconds": _median(runs, "seconds"),
        "peak_mb": _median(runs, "peak_mb"),
        "added_mb": float(statistics.median(r["peak_mb"] - r["baseline_mb"] for r in runs)),
        "steps": runs[0].get("steps"),
        "all_seconds": [r["seconds"] for r in runs],
    }


def measure_xprof(path: Path, repeats: int, slow_s: float,
                  cap_gb: float = XPROF_CAP_GB) -> dict[str, Any]:
    """XProf's overview_page, each run on a fresh copy of the file in an empty directory (a
    big profile: under an address-space cap of ``cap_gb``; ``{"out_of_gb": cap}`` when it
    ran out)."""
    runs: list[dict[str, Any]] = []
    big = path.stat().st_size >= BIG_BYTES
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="stepscope-bench-xprof-") as tmp:
            copy = Path(tmp) / path.name
            if big:
                copy.symlink_to(path.resolve())  # no second GB on disk; XProf writes beside
            else:
                shutil.copyfile(path, copy)
            run = _run_child(["--child", "xprof", str(copy)], big=big,
                             cap_gb=cap_gb if big else None)
        if "out_of_gb" in run:
            return run
        runs.append(run)
        if runs[0]["seconds"] > slow_s:
            break
    out = _summarise(runs)
    out["steps"] = runs[0]["steps"]
    return out


def measure_cold(path: Path, repeats: int) -> dict[str, Any]:
    """stepscope cold (no cache): the median of ``repeats`` fresh processes."""
    big = path.stat().st_size >= BIG_BYTES
    cold_runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="stepscope-bench-cache-") as empty:
            env = {"STEPSCOPE_NO_CACHE": "1", "STEPSCOPE_CACHE_DIR": empty}
            cold_runs.append(_run_child(["--child", "cold", str(path)], env, big=big))
    return _summarise(cold_runs)


def measure_stepscope(path: Path, repeats: int) -> dict[str, Any]:
    """stepscope cold (no cache), the cache-filling first open, and warm (cached) opens."""
    big = path.stat().st_size >= BIG_BYTES
    cold = measure_cold(path, repeats)
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-cache-") as cache_dir:
        env = {"STEPSCOPE_NO_CACHE": "0", "STEPSCOPE_CACHE_DIR": cache_dir}
        fill = _run_child(["--child", "fill", str(path)], env, big=big)
        filled = sorted(p.name.split(".", 1)[1] for p in Path(cache_dir).iterdir())
        warm_runs = [_run_child(["--child", "warm", str(path)], env, big=big)
                     for _ in range(repeats)]

    warm = _summarise(warm_runs)
    warm["tables_seconds"] = _median(warm_runs, "tables_seconds")
    warm["tables_steps"] = warm_runs[0]["tables_steps"]
    warm["tables_peak_mb"] = _median(warm_runs, "tables_peak_mb")
    warm["tables_added_mb"] = float(statistics.median(
        r["tables_peak_mb"] - r["baseline_mb"] for r in warm_runs))
    return {
        "cold": cold,
        "fill": {"seconds": fill["seconds"], "peak_mb": fill["peak_mb"],
                 "added_mb": fill["peak_mb"] - fill["baseline_mb"], "cache_files": filled},
        "warm": warm,
        "events": warm_runs[0]["events"],
    }


# --- profiles ----------------------------------------------------------------------------------


def _size_label(target_mb: float) -> str:
    return f"gen-{target_mb:g}MB"


def generated_profile(workdir: Path, target_mb: float, bytes_per_step: list[float]) -> \
        dict[str, Any]:
    """A generated profile of at least ``target_mb`` MB: reused from ``workdir`` or made now.

    ``bytes_per_step`` holds one running estimate, updated from every profile made.
    """
    where = workdir / _size_label(target_mb)
    meta_path = where / "meta.json"
    target = target_mb * 1e6
    try:
        meta = json.loads(meta_path.read_text())
        path = where / meta["path"]
        if (meta["generator"] == GENERATOR_VERSION and path.stat().st_size == meta["bytes"]
                and meta["bytes"] >= target):
            _say(f"  {_size_label(target_mb)}: reusing {path} "
                  f"({meta['bytes'] / 1e6:.1f} MB, {meta['steps']:,} steps)")
            bytes_per_step[0] = meta["bytes"] / meta["steps"]
            return {**meta, "path": str(path)}
    except (OSError, ValueError, KeyError, TypeError):
        pass

    steps = max(math.ceil(target * 1.05 / bytes_per_step[0]), 10)
    max_events = steps * EVENTS_PER_STEP_BOUND + 100_000
    while True:
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        _say(f"  {_size_label(target_mb)}: recording {steps:,} steps with the Python tracer "
              f"on ...")
        made = _run_child(["--child", "generate", str(where / "logs"), str(steps),
                           str(max_events)], quiet=False)
        _say(f"    wrote {made['bytes'] / 1e6:.1f} MB in {made['seconds']:.1f} s")
        if made["dropped"]:
            max_events *= 2
            _say("    events were dropped at the cap; again with max_events "
                  f"{max_events:,}")
            continue
        bytes_per_step[0] = made["bytes"] / steps
        if made["bytes"] >= target:
            break
        steps = max(steps * 2, math.ceil(target * 1.05 / bytes_per_step[0]))
        _say(f"    below {target_mb:g} MB; again with {steps:,} steps")
    meta = {"generator": GENERATOR_VERSION, "steps": steps, "bytes": made["bytes"],
            "path": os.path.relpath(made["path"], where), "target_mb": target_mb}
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return {**meta, "path": made["path"]}


# --- start-up: the CLI's fixed cost, a fresh server's first window -----------------------------


def _child_tiny(logdir: str) -> dict[str, Any]:
    """Record a profile of three empty steps (a few events) under ``logdir``."""
    import stepscope

    stepscope.start(logdir, options=stepscope.ProfilerOptions(counter_interval_ms=0))
    for i in range(3):
        with stepscope.Trace("train", step_num=i, _r=1):
            pass
    path = stepscope.stop()
    if path is None:
        raise RuntimeError("stepscope.stop() wrote no profile")
    return {"path": str(path), "bytes": Path(path).stat().st_size}


def tiny_profile(workdir: Path) -> Path:
    """A profile of a few events (made once under ``workdir``): what start-up costs."""
    where = workdir / "tiny"
    found = sorted(where.glob("logs/plugins/profile/*/*.xplane.pb"))
    if found:
        return found[-1]
    shutil.rmtree(where, ignore_errors=True)
    return Path(_run_child(["--child", "tiny", str(where / "logs")])["path"])


def _startup_env(src: Path | None, cache_dir: str, pycache: str) -> dict[str, str]:
    """A child's environment: byte-code written once to ``pycache`` (as an installed package
    has it), the cache in ``cache_dir``, and ``src`` first on the path when given."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update({"PYTHONPYCACHEPREFIX": pycache, "STEPSCOPE_CACHE_DIR": cache_dir,
                "STEPSCOPE_NO_CACHE": "0"})
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _timed_process(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU user + system) seconds of one child process run to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def measure_cli(tiny: Path, repeats: int = CLI_REPEATS, base_src: Path | None = None
                ) -> dict[str, Any]:
    """``stepscope report`` on the (cached) tiny profile, ``python -c pass`` and, with
    ``base_src``, report from that source tree: interleaved runs, medians (wall and CPU)."""
    here = Path(__file__).resolve().parent.parent / "src"
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-cli-") as tmp:
        cases: dict[str, tuple[list[str], dict[str, str]]] = {
            "report": ([sys.executable, "-m", "stepscope", "report", str(tiny)],
                       _startup_env(here, f"{tmp}/cache", f"{tmp}/pyc")),
            "python": ([sys.executable, "-c", "pass"], _startup_env(None, tmp, f"{tmp}/pyc")),
        }
        if base_src is not None:
            cases["base"] = ([sys.executable, "-m", "stepscope", "report", str(tiny)],
                             _startup_env(base_src, f"{tmp}/cache-base", f"{tmp}/pyc-base"))
        for command, env in cases.values():  # compile byte-code, fill the cache
            _timed_process(command, env)
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for _ in range(repeats):
            for name, (command, env) in cases.items():
                runs[name].append(_timed_process(command, env))
    return {name: {"wall_s": statistics.median(w for w, _ in r),
                   "cpu_s": statistics.median(c for _, c in r)} for name, r in runs.items()}


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get_json(url: str) -> tuple[int, Any]:
    """GET ``url``: (status, JSON body); (0, None) while nothing listens there."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=600) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, None
    except OSError:
        return 0, None


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` and its waited-for children used so far
    (None where /proc does not tell): on a loaded machine, steadier than wall time."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def _poll(proc: subprocess.Popen[bytes], base: str, route: str, **params: Any) -> Any:
    """GET ``base + route`` of run "run" until it answers 200 (not 202: still loading, nor
    nothing: not started yet)."""
    import urllib.parse

    query = urllib.parse.urlencode({"run": "run", **params})
    while True:
        status, body = _get_json(f"{base}{route}?{query}")
        if status == 200:
            return body
        if proc.poll() is not None:
            raise RuntimeError("the server exited")
        time.sleep(0.005)


def serve_first_window(path: Path, src: Path | None = None) -> dict[str, Any]:
    """Start ``stepscope serve`` on a logdir holding ``path`` (empty cache); the seconds from
    starting the process to its answer of the trace viewer's first window, and to its
    answer of the window's metadata on the way."""
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-serve-") as tmp:
        run = Path(tmp) / "logs" / "plugins" / "profile" / "run"
        run.mkdir(parents=True)
        (run / path.name).symlink_to(path.resolve())
        port = _free_port()
        env = _startup_env(src or Path(__file__).resolve().parent.parent / "src",
                           f"{tmp}/cache", f"{tmp}/pyc")
        command = [sys.executable, "-m", "stepscope", "serve", str(Path(tmp) / "logs"),
                   "--port", str(port)]
        # Byte-code compiled by a first server (an installed package has it), then timed.
        out: dict[str, Any] = {}
        for attempt in ("compile", "timed"):
            shutil.rmtree(f"{tmp}/cache", ignore_errors=True)
            started = time.perf_counter()
            proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            try:
                base = f"http://127.0.0.1:{port}/api/"
                meta = _poll(proc, base, "data", tool="trace_viewer")
                out["meta_s"] = time.perf_counter() - started
                window = _poll(proc, base, "trace/window", start_ns="0",
                               end_ns=str(meta["span_ns"]), width="2000")
                out["first_window_s"] = time.perf_counter() - started
                out["first_window_cpu_s"] = _cpu_s(proc.pid)
                out["window_keys"] = sorted(window)[:8]
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            if attempt == "compile":
                port = _free_port()
                command[-1] = str(port)
    return out


def measure_startup(workdir: Path, serve_profile: Path | None, repeats: int,
                    base_src: Path | None) -> dict[str, Any]:
    """The CLI's fixed cost and (when ``serve_profile``) a fresh server's first window."""
    tiny = tiny_profile(workdir)
    out: dict[str, Any] = {"tiny": str(tiny), "tiny_bytes": tiny.stat().st_size,
                           "cli": measure_cli(tiny, max(repeats, 5), base_src)}
    if serve_profile is not None:
        out["serve_profile"] = str(serve_profile)
        out["serve_bytes"] = serve_profile.stat().st_size
        out["serve"] = serve_first_window(serve_profile)
        if base_src is not None:
            out["serve_base"] = serve_first_window(serve_profile, base_src)
    return out


def print_startup(startup: dict[str, Any]) -> None:
    """The start-up figures, and their goals."""
    cli = startup["cli"]
    print()
    print(f"start-up: `stepscope report` on a {startup['tiny_bytes']:,}-byte profile (cached), "
          "median of fresh processes, byte-code compiled")
    for name, label in (("report", "stepscope report"), ("base", "stepscope report (--base-src)"),
                        ("python", "python -c pass")):
        if name in cli:
            print(f"  {label:32s} CPU {cli[name]['cpu_s'] * 1e3:6.0f} ms   wall "
                  f"{cli[name]['wall_s'] * 1e3:6.0f} ms")
    if "base" in cli:
        ratio = cli["report"]["cpu_s"] / cli["base"]["cpu_s"]
        print(f"  report ÷ base (CPU): {ratio:.2f}x -> goal <= {GOAL_CLI_OVER_BASE:g}x: "
              f"{'MET' if ratio <= GOAL_CLI_OVER_BASE else 'MISSED'}")
    if "serve" in startup:
        serve = startup["serve"]
        mb = startup["serve_bytes"] / 1e6
        print(f"  fresh `stepscope serve` on a {mb:.1f} MB profile: trace viewer metadata "
              f"{serve['meta_s']:.2f} s, first window {serve['first_window_s']:.2f} s after "
              f"the process started (its CPU {_fmt(serve['first_window_cpu_s'], '.2f')} s) "
              f"-> goal <= {GOAL_SERVE_FIRST_WINDOW_S:g} s: "
              f"{'MET' if serve['first_window_s'] <= GOAL_SERVE_FIRST_WINDOW_S else 'MISSED'}")
        if "serve_base" in startup:
            base = startup["serve_base"]
            print(f"  the same with --base-src: first window {base['first_window_s']:.2f} s "
                  f"(its CPU {_fmt(base['first_window_cpu_s'], '.2f')} s)")


# --- the run -----------------------------------------------------------------------------------


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for dist in ("stepscope", "xprof", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _xprof_available() -> bool:
    from importlib.util import find_spec

    try:
        return find_spec("xprof.convert.raw_to_tool_data") is not None
    except ModuleNotFoundError:
        return False


def benchmark(profiles: list[dict[str, Any]], repeats: int, slow_s: float,
              with_xprof: bool, tiny: Path | None = None,
              cap_gb: float = XPROF_CAP_GB) -> list[dict[str, Any]]:
    """Measure every profile; one result dict each. ``tiny``: a profile of a few events,
    whose peak is subtracted from each profile's (memory beyond a tiny profile's)."""
    results = []
    tiny_peak = xprof_tiny_peak = None
    if tiny is not None:
        _say("  a tiny profile (the baseline of memory) ...")
        tiny_peak = measure_cold(tiny, repeats)["peak_mb"]
        if with_xprof:
            xprof_tiny = measure_xprof(tiny, 1, slow_s)
            xprof_tiny_peak = xprof_tiny.get("peak_mb")
    for prof in profiles:
        path = Path(prof["path"])
        size = path.stat().st_size
        _say(f"  {prof['label']} ({size / 1e6:.1f} MB): ", end="")
        row: dict[str, Any] = {"label": prof["label"], "path": str(path), "bytes": size,
                               "steps_generated": prof.get("steps")}
        row["tiny_peak_mb"], row["xprof_tiny_peak_mb"] = tiny_peak, xprof_tiny_peak
        row["xprof"] = row["xprof_note"] = None
        if with_xprof:
            _say("XProf ...", end=" ")
            xprof = measure_xprof(path, repeats, slow_s, cap_gb)
            if "out_of_gb" in xprof:
                row["xprof_note"] = f"XProf ran out of {xprof['out_of_gb']:g} GB"
            else:
                row["xprof"] = xprof
        _say("stepscope ...", end=" ")
        row.update(measure_stepscope(path, repeats))
        _say("done")
        results.append(row)
    return results


def goals(row: dict[str, Any]) -> dict[str, Any]:
    """The figures each goal is judged on, and whether it is met (None when not measurable)."""
    # The peaks are in MiB (ru_maxrss is in KiB): the file too, or every ratio reads 4.9 % low.
    mb = row["bytes"] / 2**20
    cold, warm, xprof = row["cold"], row["warm"], row["xprof"]
    ratio = cold["seconds"] / xprof["seconds"] if xprof else None
    # Peak beyond a tiny profile's (the interpreter, NumPy and the code cost the same for
    # every file), else beyond the RSS after the imports.
    tiny_peak = row.get("tiny_peak_mb")
    beyond = cold["peak_mb"] - tiny_peak if tiny_peak is not None else cold["added_mb"]
    peak_ratio = beyond / mb if mb else None
    xprof_ratio = None
    if xprof and row.get("xprof_tiny_peak_mb") is not None and mb:
        xprof_ratio = (xprof["peak_mb"] - row["xprof_tiny_peak_mb"]) / mb
    return {
        "xprof_peak_over_file": xprof_ratio,
        "cold_over_xprof": ratio,
        "cold_le_half_xprof": None if ratio is None else ratio <= GOAL_COLD_OVER_XPROF,
        "added_peak_over_file": peak_ratio,
        "peak_le_2x_file": None if peak_ratio is None else peak_ratio <= GOAL_PEAK_OVER_FILE,
        "warm_ms": warm["seconds"] * 1e3,
        "warm_le_100ms": warm["seconds"] * 1e3 <= GOAL_WARM_MS,
    }


def _expected_steps(generated: int) -> int:
    """How many steps the overview should list for ``generated`` recorded ones."""
    from stepscope.analysis.run_model.steps import TRIM_ABOVE

    return generated - 2 if generated > TRIM_ABOVE else generated


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def print_table(result: dict[str, Any]) -> None:
    """The side-by-side table, the sanity checks and one line per goal."""
    v = result["versions"]
    print()
    print(f"stepscope {v['stepscope']} vs XProf {v['xprof'] or '(not installed)'}: open a "
          f"profile and compute its overview (Python {result['python']}, {result['platform']})")
    print(f"median of {result['repeats']} run(s), each in a fresh process; times exclude "
          "imports; memory in MiB: '+MB' is peak RSS minus the RSS after imports, 'peak MB' the "
          "process total; peak-tiny/file divides by the file's size in MiB")
    header = ("profile", "file MB", "events", "XProf s", "XProf +MB", "XProf peak MB",
              "XProf peak-tiny/file", "cold s", "cold +MB", "cold peak MB", "cold/XProf",
              "peak-tiny/file", "warm ms", "warm (tables cached) ms")
    rows = []
    for row in result["profiles"]:
        x, c, w, g = row["xprof"], row["cold"], row["warm"], row["goals"]
        xprof_s = None if x is None else _fmt(x["seconds"], ".2f") + (
            "*" if x["runs"] < result["repeats"] else "")
        rows.append((
            row["label"], f"{row['bytes'] / 1e6:.1f}", f"{row['events']:,}",
            xprof_s or ("OOM" if row.get("xprof_note") else "n/a"),
            _fmt(x and x["added_mb"], ".0f"), _fmt(x and x["peak_mb"], ".0f"),
            _fmt(g["xprof_peak_over_file"], ".1f"),
            f"{c['seconds']:.2f}", f"{c['added_mb']:.0f}", f"{c['peak_mb']:.0f}",
            _fmt(g["cold_over_xprof"], ".2f"), _fmt(g["added_peak_over_file"], ".2f"),
            f"{w['seconds'] * 1e3:.1f}", f"{w['tables_seconds'] * 1e3:.1f}"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print()
    print("  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in
                    enumerate(zip(header, widths, strict=True))))
    for r in rows:
        print("  ".join(s.rjust(w) if i else s.ljust(w) for i, (s, w) in
                        enumerate(zip(r, widths, strict=True))))
    for row in result["profiles"]:
        if row.get("xprof_note"):
            print(f"{row['label']}: {row['xprof_note']} (address-space cap)")
    if result["profiles"] and result["profiles"][0].get("tiny_peak_mb") is not None:
        print(f"peak-tiny: peak RSS minus that of a tiny profile's cold open "
              f"({result['profiles'][0]['tiny_peak_mb']:.0f} MiB), as the goals count it")
    if any(row["xprof"] and row["xprof"]["runs"] < result["repeats"]
           for row in result["profiles"]):
        print(f"* XProf ran once on this profile: its first run took over "
              f"{result['xprof_slow_s']:g} s")

    print()
    print("first open with the cache on (fills it), and sanity checks")
    for row in result["profiles"]:
        f, x = row["fill"], row["xprof"]
        counts = [row["cold"]["steps"], row["warm"]["steps"], row["warm"]["tables_steps"]]
        generated = row["steps_generated"]
        expected = None if generated is None else _expected_steps(generated)
        agree = len(set(counts)) == 1 and (expected is None or counts[0] == expected)
        print(f"  {row['label']}: first open {f['seconds']:.2f} s, +{f['added_mb']:.0f} MB; "
              f"cache holds {', '.join(f['cache_files']) or 'nothing'}; warm (tables cached) "
              f"+{row['warm']['tables_added_mb']:.0f} MB")
        made = ("" if generated is None else f"steps generated {generated:,} (expected "
                f"{expected:,}: first and last trimmed, as XProf does), ")
        print(f"  {row['label']}: {made}stepscope {counts[0]:,} (cold, warm and "
              f"tables-cached runs agree: {'yes' if len(set(counts)) == 1 else 'NO'}), "
              f"XProf {_fmt(x and x['steps'], ',')}"
              f"{'  ok' if agree else '  <-- MISMATCH'}")

    print()
    print("goals (a benchmark: a missed goal is reported, not an error)")
    for row in result["profiles"]:
        g = row["goals"]
        label = row["label"]
        mb = row["bytes"] / 2**20  # MiB, as the peaks

        def state(ok: bool | None) -> str:
            return "n/a" if ok is None else ("MET" if ok else "MISSED")

        x = row["xprof"]
        versus = ("XProf not measured" if x is None else
                  f"{row['cold']['seconds']:.2f} s vs {x['seconds']:.2f} s, "
                  f"{g['cold_over_xprof']:.2f}x")
        print(f"  {label}: cold <= {GOAL_COLD_OVER_XPROF:g}x XProf: "
              f"{state(g['cold_le_half_xprof'])} ({versus})")
        print(f"  {label}: peak RSS beyond a tiny profile's <= {GOAL_PEAK_OVER_FILE:g}x file "
              f"size: {state(g['peak_le_2x_file'])} (+{row['cold']['added_mb']:.0f} MiB added, "
              f"{row['cold']['peak_mb']:.0f} MiB total, for a {mb:.1f} MiB file: "
              f"{_fmt(g['added_peak_over_file'], '.2f')}x beyond a tiny profile's; XProf "
              f"{_fmt(g['xprof_peak_over_file'], '.1f')}x)")
        print(f"  {label}: warm <= {GOAL_WARM_MS:g} ms: {state(g['warm_le_100ms'])} "
              f"({g['warm_ms']:.1f} ms; from the cached tables "
              f"{row['warm']['tables_seconds'] * 1e3:.1f} ms)")


def _parse_sizes(text: str) -> list[float]:
    try:
        sizes = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of MB") from None
    if any(s <= 0 for s in sizes):
        raise argparse.ArgumentTypeError("sizes must be positive (MB)")
    return sizes


def main(argv: list[str] | None = None) -> int:
    """Parse the command line; run the benchmark (or one child measurement)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        mode, *rest = argv[1:]
        result = (_child_generate(rest[0], int(rest[1]), int(rest[2])) if mode == "generate"
                  else _child_tiny(rest[0]) if mode == "tiny" else CHILDREN[mode](rest[0]))
        print(_RESULT_MARK + json.dumps(result))
        return 0

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="append", type=Path, default=[], metavar="FILE",
                        help="an .xplane.pb file to benchmark (repeatable); with it, no "
                        "profiles are generated unless --sizes is given too")
    parser.add_argument("--sizes", type=_parse_sizes, metavar="MB,MB,...",
                        help="sizes of the generated profiles, in MB "
                        f"(default {','.join(f'{s:g}' for s in DEFAULT_SIZES_MB)})")
    parser.add_argument("--quick", action="store_true",
                        help=f"generate {','.join(f'{s:g}' for s in QUICK_SIZES_MB)} MB only "
                        "(no >= 100 MB profile), for a fast smoke run")
    parser.add_argument("--workdir", type=Path, default=Path(DEFAULT_WORKDIR),
                        help=f"where generated profiles are kept (default {DEFAULT_WORKDIR}/)")
    parser.add_argument("--repeats", type=int, default=REPEATS,
                        help=f"runs per measurement, the median is kept (default {REPEATS})")
    parser.add_argument("--xprof-slow", type=float, default=XPROF_SLOW_S, metavar="S",
                        help="run XProf once only where its first run takes longer "
                        f"(default {XPROF_SLOW_S:g} s)")
    parser.add_argument("--no-xprof", action="store_true", help="measure stepscope only")
    parser.add_argument("--tf", action="store_true",
                        help="add the >= 100 MB real TensorFlow profile (benchmarks/tf_profile.py "
                        "makes it once)")
    parser.add_argument("--tf-steps", action="store_true",
                        help="add a ~40 MiB TensorFlow profile with marked steps and context "
                        "links (tf_profile.tf_steps_profile makes it once): the step grouping's "
                        "work, which the Keras capture lacks")
    parser.add_argument("--startup", action="store_true",
                        help="measure start-up only: the CLI's fixed cost and a fresh server's "
                        "first window (on the 10 MB profile)")
    parser.add_argument("--no-startup", action="store_true",
                        help="leave the start-up figures out")
    parser.add_argument("--base-src", type=Path, metavar="DIR",
                        help="another source tree (e.g. the previous commit's src/) to time "
                        "start-up against")
    parser.add_argument("--xprof-cap-gb", type=float, default=XPROF_CAP_GB, metavar="GB",
                        help="XProf's address-space cap on profiles of 500 MB or more "
                        f"(default {XPROF_CAP_GB:g})")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    for given in args.profile:
        if not given.is_file():
            parser.error(f"{given} is not a file")

    if args.startup:
        _say(f"profiles in {args.workdir}/")
        ten = generated_profile(args.workdir, 10.0, [BYTES_PER_STEP_GUESS])
        _say("measuring start-up")
        startup = measure_startup(args.workdir, Path(ten["path"]), args.repeats, args.base_src)
        if args.json:
            print(json.dumps(startup, indent=2))
        else:
            print_startup(startup)
        return 0

    sizes: list[float] = (args.sizes if args.sizes is not None
                          else [] if args.profile
                          else list(QUICK_SIZES_MB if args.quick else DEFAULT_SIZES_MB))
    with_xprof = not args.no_xprof and _xprof_available()
    if not args.no_xprof and not with_xprof:
        _say("XProf is not installed: measuring stepscope only")

    profiles: list[dict[str, Any]] = []
    if sizes:
        _say(f"profiles in {args.workdir}/")
        estimate = [BYTES_PER_STEP_GUESS]
        for target in sorted(sizes):
            made = generated_profile(args.workdir, target, estimate)
            profiles.append({"label": _size_label(target), "path": made["path"],
                             "steps": made["steps"]})
    if args.tf or args.tf_steps:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from tf_profile import tf_profile, tf_steps_profile

        if args.tf_steps:
            args.profile.append(tf_steps_profile())
        if args.tf:
            args.profile.append(tf_profile())
    profiles += [{"label": f"{p.parent.name}/{p.name}", "path": str(p), "steps": None}
                 for p in args.profile]

    _say("measuring")
    started = time.perf_counter()
    measured = benchmark(profiles, args.repeats, args.xprof_slow, with_xprof,
                         tiny_profile(args.workdir), args.xprof_cap_gb)
    for row in measured:
        row["goals"] = goals(row)
    startup = None
    if not args.no_startup:
        ten = next((p for p in profiles if p["label"] == _size_label(10.0)), None)
        startup = measure_startup(args.workdir, Path(ten["path"]) if ten else None,
                                  args.repeats, args.base_src)
    result = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": _versions(),
        "repeats": args.repeats,
        "xprof_slow_s": args.xprof_slow,
        "profiles": measured,
        "startup": startup,
        "seconds": time.perf_counter() - started,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
        if startup is not None:
            print_startup(startup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
