"""Every figure of issue 32's table, stepscope's beside XProf's and their ratio, measured in
one run at 10 MB and at >= 1 GB (the profiles of ``big_profile.py``).

Per size, interleaved (ours, then XProf's, ``--repeats`` times; medians):

- cold load + overview: ``overview_dict(file, use_cache=False)`` (what ``stepscope report``
  does) vs XProf's ``overview_page`` conversion, each timed in a fresh process without its
  imports (``load_and_overview.py``'s children); and the whole ``stepscope report --no-cache``
  command vs a whole process running XProf's conversion, start-up included;
- memory: each of those processes' peak RSS beyond the same process's on a tiny profile,
  ÷ the file's size (``report`` vs XProf's overview; ``serve`` while it indexes vs XProf's
  trace viewer conversion);
- the trace viewer from a fresh ``stepscope serve`` (``trace_viewer.http_window``): the first
  window (coarse), the first window with events from the full index, a warm window; XProf:
  a cold ``trace_viewer@`` conversion and a warm one (its saved result kept);
- every tool on the cached run (``run_tools.tool_times``): the slowest, and at >= 500 MB each
  one (goal: <= 100 ms);
- the slope of cold load + overview time against file size over the sizes measured (1.0:
  linear; a log-log fit).

XProf runs under an address-space cap (``prlimit --as``, ``--xprof-cap-gb``, default 12): when
it dies of it the table says "ran out of N GB". Run it holding the machine's big-profile lock:

    flock /work/big.lock .venv/bin/python benchmarks/sizes.py [--sizes 10mb,1gb] [--skip-xprof]

Figures go to the terminal and to ``benchmarks/results/sizes.json`` (``harness.Bench``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (this checkout's sources first, for every process started)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import big_profile  # noqa: E402
import load_and_overview  # noqa: E402
import trace_viewer  # noqa: E402
from harness import Bench  # noqa: E402

BIG_REPEATS_ABOVE = 500_000_000  # at this size and above, one run of each heavy measure
GOAL_TOOL_MS = 100.0
# What a process that hit its address-space cap says before it dies (compared lower-case)
_OOM_SIGNS = ("memoryerror", "bad_alloc", "cannot allocate memory", "out of memory",
              "resource_exhausted", "resource exhausted")


def _env() -> dict[str, str]:
    """The children's environment: this checkout's sources first; TensorFlow quiet."""
    path = os.pathsep.join([str(ROOT / "src"), str(HERE),
                            *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "3"}


def child(command: list[str], env: dict[str, str] | None = None,
          cap_gb: float | None = None) -> dict[str, Any]:
    """Run ``command`` as a child: ``seconds`` (wall, start-up included), ``peak_mb`` (its own
    peak RSS), ``result`` (the JSON it printed after ``MARK``, if any); ``ran_out`` ("ran out of
    N GB") instead when it died of its address-space cap ``cap_gb``."""
    if cap_gb is not None:
        command = ["prlimit", f"--as={int(cap_gb * 1e9)}", "--", *command]
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, env={**_env(), **(env or {})}, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # reaped here, to read its own rusage
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if code != 0:
        if cap_gb is not None and (code < 0 or any(s in stderr.lower() for s in _OOM_SIGNS)):
            return {"ran_out": f"ran out of {cap_gb:g} GB", "seconds": seconds}
        last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {code}"
        raise RuntimeError(f"{' '.join(command[:6])}: {last}")
    result = None
    for line in stdout.splitlines():
        if line.startswith(MARK):
            result = json.loads(line[len(MARK):])
    return {"seconds": seconds, "peak_mb": usage.ru_maxrss / 1024, "result": result}


MARK = load_and_overview._RESULT_MARK  # the one line a child's answer is on


# --- the children of this script -----------------------------------------------------------


def _child_xprof_trace(path: str, repeats: int) -> dict[str, Any]:
    """XProf's trace viewer: a cold ``trace_viewer@`` conversion (nothing saved), then warm
    ones (its saved result kept beside the file); seconds, and warm milliseconds."""
    from xprof.convert import raw_to_tool_data

    started = time.perf_counter()
    raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer@", {"use_saved_result": False})
    cold = time.perf_counter() - started
    raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer@", {})  # saves its result
    warm = Bench.time(lambda: raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer@",
                                                                   {}), repeats)
    return {"cold_s": cold, "warm_ms": warm}


def _child_tools(run_dir: str, base: str, repeats: int) -> dict[str, Any]:
    """Every tool on the cached run (``run_tools.tool_times``)."""
    import stepscope
    from run_tools import tool_times

    cold, times = tool_times(Path(run_dir), Path(base), repeats)
    # a window no one asked for before: no kept answer, the table and index read again
    span = int(stepscope.open(run_dir).tool("trace_viewer").data["span_ns"])
    new_window = Bench.time(lambda: stepscope.open(run_dir).tool(
        "trace_window", start_ns=span // 3, end_ns=span // 3 + span // 97, width=1013), 1)
    return {"cold_open_ms": cold, "tools": times, "new_window_ms": new_window}


# --- one size --------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _link_dir(path: Path, tmp: Path, name: str) -> Path:
    """A fresh directory ``tmp/name`` holding a link to ``path`` (XProf writes beside what it
    reads; stepscope's run directory of that file alone)."""
    where = tmp / name
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    (where / path.name).symlink_to(path.resolve())
    return where / path.name


class Measures:
    """The runs of one profile, each measure's values kept for their median."""

    def __init__(self, path: Path, cap_gb: float, with_xprof: bool) -> None:
        self.path = path
        self.cap_gb = cap_gb
        self.with_xprof = with_xprof
        self.values: dict[str, list[float]] = {}
        self.ran_out: dict[str, str] = {}
        self.tmp = Path(tempfile.mkdtemp(prefix="stepscope-bench-sizes-"))

    def keep(self, key: str, value: float | None) -> None:
        if value is not None:
            self.values.setdefault(key, []).append(value)

    def median(self, key: str) -> float | None:
        return _median(self.values.get(key, []))

    def report(self) -> None:
        """``stepscope report --no-cache --json`` in a fresh process, and the cold overview
        in a child timed without its imports."""
        cache = {"STEPSCOPE_CACHE_DIR": str(self.tmp / "cache-report"), "STEPSCOPE_NO_CACHE": "1"}
        done = child([sys.executable, "-m", "stepscope", "report", "--no-cache", "--json",
                      str(self.path)], cache)
        self.keep("report_s", done["seconds"])
        self.keep("report_peak_mb", done["peak_mb"])
        done = child([sys.executable, str(HERE / "load_and_overview.py"), "--child", "cold",
                      str(self.path)], cache)
        self.keep("overview_s", done["result"]["seconds"])
        shutil.rmtree(self.tmp / "cache-report", ignore_errors=True)

    def xprof_overview(self) -> None:
        """XProf's ``overview_page`` in a fresh process (capped), timed with and without its
        imports."""
        if not self.with_xprof or "xprof_overview" in self.ran_out:
            return
        link = _link_dir(self.path, self.tmp, "xprof-overview")
        done = child([sys.executable, str(HERE / "load_and_overview.py"), "--child", "xprof",
                      str(link)], cap_gb=self.cap_gb)
        if "ran_out" in done:
            self.ran_out["xprof_overview"] = done["ran_out"]
            return
        self.keep("xprof_process_s", done["seconds"])
        self.keep("xprof_overview_s", done["result"]["seconds"])
        self.keep("xprof_overview_peak_mb", done["peak_mb"])

    def serve(self) -> None:
        """A fresh ``stepscope serve``: first window, first window with events, warm window,
        its peak while indexing (``trace_viewer.http_window``)."""
        out = trace_viewer.http_window(self.path)
        self.keep("first_window_s", out["first_window_s"])
        self.keep("events_window_s", out["full_index_window_s"])
        self.keep("warm_window_ms", out["warm_window_ms"])
        self.keep("serve_peak_added_mb", out["server_peak_added_mb"])
        self.keep("serve_kept_added_mb", out["server_added_mb"])

    def xprof_trace(self, repeats: int) -> None:
        """XProf's trace viewer, cold and warm, in a fresh process (capped)."""
        if not self.with_xprof or "xprof_trace" in self.ran_out:
            return
        link = _link_dir(self.path, self.tmp, "xprof-trace")
        done = child([sys.executable, __file__, "--child", "xprof_trace", str(link),
                      str(repeats)], cap_gb=self.cap_gb)
        if "ran_out" in done:
            self.ran_out["xprof_trace"] = done["ran_out"]
            return
        self.keep("xprof_trace_s", done["result"]["cold_s"])
        self.keep("xprof_warm_ms", done["result"]["warm_ms"])
        self.keep("xprof_trace_peak_mb", done["peak_mb"])

    def tools(self, base: Path, repeats: int) -> dict[str, float]:
        """Every tool on the cached run: milliseconds by tool."""
        link = _link_dir(self.path, self.tmp, "run")
        done = child([sys.executable, __file__, "--child", "tools", str(link.parent), str(base),
                      str(repeats)], {"STEPSCOPE_CACHE_DIR": str(self.tmp / "cache-tools")})
        self.keep("new_window_ms", done["result"]["new_window_ms"])
        times: dict[str, float] = done["result"]["tools"]
        return times

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def measure(path: Path, repeats: int, cap_gb: float, with_xprof: bool,
            base: Path | None) -> tuple[Measures, dict[str, float]]:
    """Every measure of one profile, ours and XProf's interleaved ``repeats`` times."""
    m = Measures(path, cap_gb, with_xprof)
    try:
        for i in range(repeats):
            _say(f"    run {i + 1}/{repeats}: report ...")
            m.report()
            _say("      XProf overview ...")
            m.xprof_overview()
            _say("      serve ...")
            m.serve()
            _say("      XProf trace viewer ...")
            m.xprof_trace(3)
        tools = {}
        if base is not None:  # (base: the diff tool's baseline run)
            _say("    tools on the cached run ...")
            tools = m.tools(base, 3 if repeats > 1 else 2)
    finally:
        m.close()
    return m, tools


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- the table -------------------------------------------------------------------------------


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return ours / theirs if ours is not None and theirs else None


def rows(label: str, size: int, m: Measures, tiny: Measures,
         tools: dict[str, float]) -> list[dict[str, Any]]:
    """The table's rows for one profile."""
    mb = size / 1e6

    def beyond(key: str) -> float | None:
        """Peak beyond the tiny profile's, ÷ the file's size."""
        mine, base = m.median(key), tiny.median(key)
        return (mine - base) / mb if mine is not None and base is not None else None

    def theirs(key: str, ran_out: str) -> float | str | None:
        return m.ran_out.get(ran_out) or m.median(key)

    out: list[dict[str, Any]] = []

    def row(measure: str, unit: str, ours: float | None, ref: float | str | None,
            note: str = "") -> None:
        ratio = _ratio(ours, ref) if not isinstance(ref, str) else None
        out.append({"size": label, "file_mb": round(mb), "measure": measure, "unit": unit,
                    "ours": ours, "xprof": ref if ref is not None else "-",
                    "ratio": ratio if ratio is not None else "-", "note": note})

    row("cold load + overview (in process)", "s", m.median("overview_s"),
        theirs("xprof_overview_s", "xprof_overview"))
    row("cold `report` (whole process)", "s", m.median("report_s"),
        theirs("xprof_process_s", "xprof_overview"), "start-up and imports included")
    peak_serve = beyond("serve_peak_added_mb")
    row("report memory: peak beyond a tiny profile's ÷ file", "x", beyond("report_peak_mb"),
        m.ran_out.get("xprof_overview") or beyond("xprof_overview_peak_mb"))
    row("trace viewer: first (coarse) window, fresh serve", "s", m.median("first_window_s"),
        theirs("xprof_trace_s", "xprof_trace"), "XProf: a cold trace_viewer@")
    row("trace viewer: first window with events", "s", m.median("events_window_s"),
        theirs("xprof_trace_s", "xprof_trace"), "XProf: a cold trace_viewer@")
    row("serve peak while indexing, beyond a tiny profile's ÷ file", "x", peak_serve,
        m.ran_out.get("xprof_trace") or beyond("xprof_trace_peak_mb"),
        f"kept after: {_text(_div(m.median('serve_kept_added_mb'), mb))}x; "
        "XProf: its trace viewer conversion")
    row("warm window", "ms", m.median("warm_window_ms"), theirs("xprof_warm_ms", "xprof_trace"),
        "XProf: trace_viewer@ on its saved result")
    slowest = max(tools, key=lambda t: tools[t]) if tools else None
    row("slowest tool on a cached profile", "ms", tools.get(slowest) if slowest else None, None,
        f"{slowest}; goal <= {GOAL_TOOL_MS:g} ms")
    row("a trace window not asked before, fresh process", "ms", m.median("new_window_ms"), None,
        "no kept answer: the table and trace index read from the cache")
    return out


def _div(a: float | None, b: float) -> float | None:
    return a / b if a is not None and b else None


def _text(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def slope(points: list[tuple[float, float]]) -> float | None:
    """The slope of log(time) against log(size), least squares (1.0: time linear in size)."""
    if len(points) < 2:
        return None
    xs = [math.log(s) for s, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else None


def _xprof_available() -> bool:
    return load_and_overview._xprof_available()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10mb,1gb",
                        help=f"profiles, comma-separated, of {', '.join(big_profile.SIZES)} "
                        "(default 10mb,1gb)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="interleaved runs below 500 MB, the median kept (default 3; one "
                        "at 500 MB and above)")
    parser.add_argument("--slope-sizes", default="10mb,200mb,1gb",
                        help="profiles the slope of cold load + overview time against size is "
                        "fitted over (default 10mb,200mb,1gb); those not in --sizes are timed "
                        "for it alone")
    parser.add_argument("--skip-xprof", action="store_true", help="measure stepscope only")
    parser.add_argument("--xprof-cap-gb", type=float, default=12.0,
                        help="XProf's address-space cap, GB (default 12)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, *rest = args.child
        result = (_child_xprof_trace(rest[0], int(rest[1])) if name == "xprof_trace"
                  else _child_tools(rest[0], rest[1], int(rest[2])))
        print(MARK + json.dumps(result), flush=True)
        return
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    slope_sizes = [s.strip() for s in args.slope_sizes.split(",") if s.strip()]
    unknown = [s for s in sizes + slope_sizes if s not in big_profile.SIZES]
    if unknown:
        parser.error(f"unknown size {unknown[0]!r}; one of {', '.join(big_profile.SIZES)}")
    with_xprof = not args.skip_xprof and _xprof_available()
    os.environ.update(_env())  # the servers trace_viewer starts: this checkout's sources

    tiny_path = big_profile.profile("tiny")
    _say(f"tiny profile {tiny_path}: the baseline of every memory figure")
    tiny, _ = measure(tiny_path, 1, args.xprof_cap_gb, with_xprof, None)
    bench = Bench("sizes", "Issue 32's table: stepscope (ours) beside XProf, ratio ours ÷ "
                  "XProf, medians of interleaved runs")
    points: list[tuple[float, float]] = []
    per_tool: dict[str, dict[str, float]] = {}
    for label in sizes:
        path = big_profile.profile(label)
        size = path.stat().st_size
        repeats = 1 if size >= BIG_REPEATS_ABOVE else max(1, args.repeats)
        _say(f"{label}: {path} ({size / 1e6:.0f} MB), {repeats} run(s)")
        m, tools = measure(path, repeats, args.xprof_cap_gb, with_xprof, tiny_path.parent)
        for r in rows(label, size, m, tiny, tools):
            bench.row(**r)
        overview = m.median("overview_s")
        if overview and label in slope_sizes:
            points.append((size, overview))
        if size >= BIG_REPEATS_ABOVE or len(sizes) == 1:
            per_tool[label] = tools
    for label in slope_sizes:
        if label in sizes:
            continue
        path = big_profile.profile(label)
        size = path.stat().st_size
        _say(f"{label}: {path} ({size / 1e6:.0f} MB): cold load + overview, for the slope")
        m = Measures(path, args.xprof_cap_gb, False)
        try:
            for _ in range(1 if size >= BIG_REPEATS_ABOVE else max(1, args.repeats)):
                m.report()
        finally:
            m.close()
        bench.row(size=label, file_mb=round(size / 1e6), measure="cold load + overview "
                  "(in process)", unit="s", ours=m.median("overview_s"), xprof="-", ratio="-",
                  note="for the slope")
        points.append((size, m.median("overview_s") or 0.0))
    fit = slope([(size, s) for size, s in points if s > 0])
    bench.row(size=",".join(label for label in slope_sizes), measure="slope of cold load + "
              "overview time against size (log-log)", unit="",
              ours=fit if fit is not None else "-", xprof="-", ratio="-",
              note="1.0: linear; " + ", ".join(f"{size / 1e6:.0f} MB: {s:.2f} s"
                                               for size, s in sorted(points)))
    for label, tools in per_tool.items():
        for tool, ms in sorted(tools.items(), key=lambda kv: -kv[1]):
            bench.row(size=label, measure=f"tool {tool} (cached)", unit="ms", ours=ms,
                      xprof="-", ratio="-", note="" if ms <= GOAL_TOOL_MS else
                      f"over {GOAL_TOOL_MS:g} ms")
    bench.finish()


if __name__ == "__main__":
    main()
