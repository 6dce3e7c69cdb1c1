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

Run from the repository root::

    .venv/bin/python benchmarks/load_and_overview.py            # 1, 10 and >= 100 MB
    .venv/bin/python benchmarks/load_and_overview.py --quick    # 1 and 10 MB only
    .venv/bin/python benchmarks/load_and_overview.py --profile run/host.xplane.pb
    .venv/bin/python benchmarks/load_and_overview.py --json     # one JSON object
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
    """This process's peak RSS so far, in MB."""
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
               quiet: bool = True) -> dict[str, Any]:
    """Run this script as a child with ``args``; return the result it prints."""
    command = [sys.executable, os.path.abspath(__file__), *args]
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}
    proc = subprocess.run(command, env=full_env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE if quiet else None, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith(_RESULT_MARK):
            result: dict[str, Any] = json.loads(line[len(_RESULT_MARK):])
            return result
    detail = (proc.stderr or "")[-3000:] if quiet else ""
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


def measure_xprof(path: Path, repeats: int, slow_s: float) -> dict[str, Any]:
    """XProf's overview_page, each run on a fresh copy of the file in an empty directory."""
    runs: list[dict[str, Any]] = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="stepscope-bench-xprof-") as tmp:
            copy = Path(tmp) / path.name
            shutil.copyfile(path, copy)
            runs.append(_run_child(["--child", "xprof", str(copy)]))
        if runs[0]["seconds"] > slow_s:
            break
    out = _summarise(runs)
    out["steps"] = runs[0]["steps"]
    return out


def measure_stepscope(path: Path, repeats: int) -> dict[str, Any]:
    """stepscope cold (no cache), the cache-filling first open, and warm (cached) opens."""
    cold_runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="stepscope-bench-cache-") as empty:
            env = {"STEPSCOPE_NO_CACHE": "1", "STEPSCOPE_CACHE_DIR": empty}
            cold_runs.append(_run_child(["--child", "cold", str(path)], env))

    with tempfile.TemporaryDirectory(prefix="stepscope-bench-cache-") as cache_dir:
        env = {"STEPSCOPE_NO_CACHE": "0", "STEPSCOPE_CACHE_DIR": cache_dir}
        fill = _run_child(["--child", "fill", str(path)], env)
        filled = sorted(p.name.split(".", 1)[1] for p in Path(cache_dir).iterdir())
        warm_runs = [_run_child(["--child", "warm", str(path)], env) for _ in range(repeats)]

    warm = _summarise(warm_runs)
    warm["tables_seconds"] = _median(warm_runs, "tables_seconds")
    warm["tables_steps"] = warm_runs[0]["tables_steps"]
    warm["tables_peak_mb"] = _median(warm_runs, "tables_peak_mb")
    warm["tables_added_mb"] = float(statistics.median(
        r["tables_peak_mb"] - r["baseline_mb"] for r in warm_runs))
    return {
        "cold": _summarise(cold_runs),
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
              with_xprof: bool) -> list[dict[str, Any]]:
    """Measure every profile; one result dict each."""
    results = []
    for prof in profiles:
        path = Path(prof["path"])
        size = path.stat().st_size
        _say(f"  {prof['label']} ({size / 1e6:.1f} MB): ", end="")
        row: dict[str, Any] = {"label": prof["label"], "path": str(path), "bytes": size,
                               "steps_generated": prof.get("steps")}
        if with_xprof:
            _say("XProf ...", end=" ")
            row["xprof"] = measure_xprof(path, repeats, slow_s)
        else:
            row["xprof"] = None
        _say("stepscope ...", end=" ")
        row.update(measure_stepscope(path, repeats))
        _say("done")
        results.append(row)
    return results


def goals(row: dict[str, Any]) -> dict[str, Any]:
    """The figures each goal is judged on, and whether it is met (None when not measurable)."""
    mb = row["bytes"] / 1e6
    cold, warm, xprof = row["cold"], row["warm"], row["xprof"]
    ratio = cold["seconds"] / xprof["seconds"] if xprof else None
    peak_ratio = cold["added_mb"] / mb if mb else None
    return {
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
          "imports; '+MB' is peak RSS minus the RSS after imports, 'peak MB' the process total")
    header = ("profile", "file MB", "events", "XProf s", "XProf +MB", "XProf peak MB",
              "cold s", "cold +MB", "cold peak MB", "cold/XProf", "+MB/file", "warm ms",
              "warm (tables cached) ms")
    rows = []
    for row in result["profiles"]:
        x, c, w, g = row["xprof"], row["cold"], row["warm"], row["goals"]
        xprof_s = None if x is None else _fmt(x["seconds"], ".2f") + (
            "*" if x["runs"] < result["repeats"] else "")
        rows.append((
            row["label"], f"{row['bytes'] / 1e6:.1f}", f"{row['events']:,}",
            xprof_s or "n/a", _fmt(x and x["added_mb"], ".0f"), _fmt(x and x["peak_mb"], ".0f"),
            f"{c['seconds']:.2f}", f"{c['added_mb']:.0f}", f"{c['peak_mb']:.0f}",
            _fmt(g["cold_over_xprof"], ".2f"), _fmt(g["added_peak_over_file"], ".1f"),
            f"{w['seconds'] * 1e3:.1f}", f"{w['tables_seconds'] * 1e3:.1f}"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print()
    print("  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in
                    enumerate(zip(header, widths, strict=True))))
    for r in rows:
        print("  ".join(s.rjust(w) if i else s.ljust(w) for i, (s, w) in
                        enumerate(zip(r, widths, strict=True))))
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
        mb = row["bytes"] / 1e6

        def state(ok: bool | None) -> str:
            return "n/a" if ok is None else ("MET" if ok else "MISSED")

        x = row["xprof"]
        versus = ("XProf not measured" if x is None else
                  f"{row['cold']['seconds']:.2f} s vs {x['seconds']:.2f} s, "
                  f"{g['cold_over_xprof']:.2f}x")
        print(f"  {label}: cold <= {GOAL_COLD_OVER_XPROF:g}x XProf: "
              f"{state(g['cold_le_half_xprof'])} ({versus})")
        print(f"  {label}: peak RSS <= {GOAL_PEAK_OVER_FILE:g}x file size: "
              f"{state(g['peak_le_2x_file'])} (+{row['cold']['added_mb']:.0f} MB added, "
              f"{row['cold']['peak_mb']:.0f} MB total, for a {mb:.1f} MB file: "
              f"{_fmt(g['added_peak_over_file'], '.1f')}x added)")
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
                  else CHILDREN[mode](rest[0]))
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
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    for given in args.profile:
        if not given.is_file():
            parser.error(f"{given} is not a file")

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
    profiles += [{"label": f"{p.parent.name}/{p.name}", "path": str(p), "steps": None}
                 for p in args.profile]

    _say("measuring")
    started = time.perf_counter()
    measured = benchmark(profiles, args.repeats, args.xprof_slow, with_xprof)
    for row in measured:
        row["goals"] = goals(row)
    result = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": _versions(),
        "repeats": args.repeats,
        "xprof_slow_s": args.xprof_slow,
        "profiles": measured,
        "seconds": time.perf_counter() - started,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
