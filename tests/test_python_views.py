"""Python views (top functions, call tree, exports) from the tracer and the sampler, checked on
programs written with known costs: pure-Python loops whose iteration counts fix each function's
share of the CPU work (60 %, 20 %, recursion, a generator; threads; a DataLoader collate).

Shares are of wall time; the work is CPU-bound and spread over many short steps, so a busy
machine stretches every function alike. The sampler's tolerance comes from its sample count
(binomial standard error), with a floor for what a GIL-bound sampler cannot resolve.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stepscope.analysis.advice import recommendations
from stepscope.analysis.python_views import (
    PythonDataError,
    python_views,
    run_python_views,
    sources_of,
    split_frame,
)
from stepscope.cli import main as cli_main
from stepscope.errors import NotFoundError
from stepscope.formats.run_reader import load
from stepscope.run_loader import run_model_of

SRC = Path(__file__).resolve().parents[1] / "src"

# Each step: heavy 6 units, medium 2, recurse 1 (five levels of 1/5), gen 1 (ten resumes of
# 1/10): 60 %, 20 %, 10 %, 10 % of the work. A unit is N iterations of the same loop.
KNOWN_COSTS = """
import sys, stepscope
from stepscope import ProfilerOptions, Trace

logdir, tracer, hz, n, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5])

def heavy():
    x = 0
    for i in range(6 * n):
        x += i * i
    return x

def medium():
    x = 0
    for i in range(2 * n):
        x += i * i
    return x

def recurse(depth):
    x = 0
    for i in range(n // 5):
        x += i * i
    if depth:
        recurse(depth - 1)

def gen():
    for _ in range(10):
        x = 0
        for i in range(n // 10):
            x += i * i
        yield x

def step():
    heavy()
    medium()
    recurse(4)
    for _ in gen():
        pass

step()
opts = ProfilerOptions(python_tracer_level=tracer, python_sampling_hz=hz,
                       counter_interval_ms=0)
with stepscope.Profile(logdir, opts) as p:
    for i in range(steps):
        with Trace("train", step_num=i, _r=1):
            step()
print(p.path)
"""

# Two threads of the program work while the main thread waits: a worker spending 3/4 of its
# work in spin_a and 1/4 in spin_b, and one that only runs spin_c.
THREADS = """
import sys, threading, stepscope
from stepscope import ProfilerOptions

logdir, tracer, hz, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def spin_a():
    x = 0
    for i in range(3 * n):
        x += i * i

def spin_b():
    x = 0
    for i in range(n):
        x += i * i

def spin_c():
    x = 0
    for i in range(n):
        x += i * i

def worker():
    for _ in range(60):
        spin_a()
        spin_b()

def other():
    for _ in range(60):
        spin_c()

opts = ProfilerOptions(python_tracer_level=tracer, python_sampling_hz=hz,
                       counter_interval_ms=0)
with stepscope.Profile(logdir, opts) as p:
    threads = [threading.Thread(target=worker, name="worker"),
               threading.Thread(target=other, name="other")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
print(p.path)
"""

# A DataLoader whose collate function does 3 units of work per batch, against 1 unit of
# "training" per step: collate is 75 % of the steps.
COLLATE = """
import sys, torch, stepscope
from stepscope import ProfilerOptions, Trace

logdir, tracer, hz, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def slow_collate(batch):
    x = 0
    for i in range(3 * n):
        x += i * i
    return torch.stack(batch)

def train_step(batch):
    x = 0
    for i in range(n):
        x += i * i
    return batch.sum()

data = [torch.zeros(4) for _ in range(8 * 41)]
loader = torch.utils.data.DataLoader(data, batch_size=8, collate_fn=slow_collate)
opts = ProfilerOptions(python_tracer_level=tracer, python_sampling_hz=hz,
                       counter_interval_ms=0)
it = iter(loader)
next(it)
with stepscope.Profile(logdir, opts) as p:
    for i in range(40):
        with Trace("train", step_num=i, _r=1):
            train_step(next(it))
print(p.path)
"""


def _run(tmp_path: Path, program: str, *args: object) -> Path:
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(program))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "logdir"),
                          *map(str, args)], env=env, capture_output=True, text=True,
                         timeout=600, check=False)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip().splitlines()[-1])


def _shares(views: Any, names: list[str]) -> dict[str, tuple[float, float, int, float]]:
    """Per function (by bare name): self share, total share, count, self share's error."""
    f = views.functions()
    out = {}
    for i, name in enumerate(f["function"]):
        if name in names:
            err = f["self_share_error"][i] if "self_share_error" in f else 0.0
            out[name] = (f["self_share"][i], f["total_share"][i], f["count"][i], err)
    return out


def _tolerance(error: float, floor: float) -> float:
    """Four standard errors, and no less than ``floor``."""
    return max(4 * error, floor)


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One run of the known-costs program under the tracer and the sampler at once."""
    tmp = tmp_path_factory.mktemp("known")
    path = _run(tmp, KNOWN_COSTS, 1, 500, 20_000, 60)
    profile = load(path, use_cache=False)
    (host, table), = profile.hosts.items()
    return path, profile, host, table


def _window_of_steps(profile: Any, host: str) -> tuple[int, int]:
    steps = run_model_of(profile, use_cache=False).hosts[host].steps
    return int(steps.start_ns[0]), int(steps.end_ns[-1])


def test_tracer_finds_the_known_costs(known: Any) -> None:
    _, profile, host, table = known
    assert sources_of(table) == ["tracer", "sampler"]
    t0, t1 = _window_of_steps(profile, host)
    views = python_views(table, host, source="tracer", start_ns=t0, end_ns=t1)
    s = _shares(views, ["heavy", "medium", "recurse", "gen", "step"])
    for name, want in (("heavy", 0.6), ("medium", 0.2), ("recurse", 0.1), ("gen", 0.1)):
        assert abs(s[name][0] - want) < 0.05, (name, s[name])
    # Recursion counted once: recurse's inclusive time is its 10 %, not 10+8+6+4+2 %.
    assert abs(s["recurse"][1] - 0.1) < 0.05
    assert s["recurse"][2] >= 5 * 55  # every level's call (ends trimmed)
    # The generator's every resume is a call; step holds everything.
    assert s["gen"][2] >= 10 * 55
    assert s["step"][1] > 0.95 and s["step"][0] < 0.05


def test_sampler_agrees_with_the_known_costs_within_its_error(known: Any) -> None:
    _, profile, host, table = known
    t0, t1 = _window_of_steps(profile, host)
    views = python_views(table, host, source="sampler", start_ns=t0, end_ns=t1)
    main = views.threads["name"].index("MainThread")
    assert views.samples >= 100, views.samples
    s = _shares(views, ["heavy", "medium", "recurse", "gen", "step"])
    # Shares of the main thread's time: the only thread that works (others wait, if any).
    scale = views.total_ns / views.threads["total_ns"][main]
    for name, want in (("heavy", 0.6), ("medium", 0.2), ("recurse", 0.1), ("gen", 0.1)):
        share, _, _, err = s[name]
        assert abs(share * scale - want) < _tolerance(err * scale, 0.05), (name, s[name])
    assert abs(s["recurse"][1] * scale - 0.1) < _tolerance(s["recurse"][3] * scale, 0.05)


def test_tracer_and_sampler_rank_the_same_top_functions(known: Any) -> None:
    _, profile, host, table = known
    t0, t1 = _window_of_steps(profile, host)
    tops = []
    for source in ("tracer", "sampler"):
        f = python_views(table, host, source=source, start_ns=t0, end_ns=t1).functions(
            filter_text="program.py")
        tops.append([n for n in f["function"] if n in ("heavy", "medium")])
    assert tops[0] == tops[1] == ["heavy", "medium"]


def test_one_step_and_a_window(known: Any) -> None:
    _, profile, host, table = known
    steps = run_model_of(profile, use_cache=False).hosts[host].steps
    one = run_python_views(profile.hosts, {host: steps}, source="tracer", step=10)
    i = steps.step_num.tolist().index(10)
    assert (one.start_ns, one.end_ns) == (int(steps.start_ns[i]), int(steps.end_ns[i]))
    whole = python_views(table, host, source="tracer")
    assert one.total_ns < whole.total_ns / 20
    s = _shares(one, ["heavy", "step"])
    assert abs(s["heavy"][0] - 0.6) < 0.15  # one step: noisier
    assert s["heavy"][2] == 1  # one call in the step
    with pytest.raises(NotFoundError, match="No step 999"):
        run_python_views(profile.hosts, {host: steps}, step=999)
    # A window clips calls to it: half of step 10 holds about half its time.
    mid = (one.start_ns + one.end_ns) // 2
    half = python_views(table, host, source="tracer", start_ns=one.start_ns, end_ns=mid)
    assert 0.3 < half.total_ns / one.total_ns < 0.7


def test_exports_hold_the_same_tree(known: Any, tmp_path: Path) -> None:
    path, _, host, table = known
    views = python_views(table, host, source="tracer")
    doc = views.speedscope()
    frames = doc["shared"]["frames"]
    (profile,) = doc["profiles"]
    assert profile["type"] == "sampled" and profile["unit"] == "nanoseconds"
    assert len(profile["samples"]) == len(profile["weights"])
    assert sum(profile["weights"]) == views.total_ns
    heavy = next(i for i, f in enumerate(frames) if f["name"] == "heavy")
    assert frames[heavy]["file"] == "program.py" and frames[heavy]["line"] > 0
    by_heavy = sum(w for s, w in zip(profile["samples"], profile["weights"], strict=True)
                   if s[-1] == heavy)
    f = views.functions()
    assert by_heavy == f["self_ns"][f["function"].index("heavy")]
    collapsed = views.collapsed().splitlines()
    assert sum(int(line.rsplit(" ", 1)[1]) for line in collapsed) == views.total_ns
    assert any(line.count(" recurse;") >= 2 for line in collapsed)  # the nested levels
    # Through the command line: CSV, JSON, speedscope and collapsed files.
    csv_file, sp, col = tmp_path / "f.csv", tmp_path / "f.speedscope.json", tmp_path / "f.txt"
    assert cli_main(["python", str(path), "--no-cache", "--source", "sampler",
                     "--csv", str(csv_file), "--speedscope", str(sp),
                     "--collapsed", str(col)]) == 0
    header = csv_file.read_text().splitlines()[0]
    assert header.endswith(",samples")
    assert json.loads(sp.read_text())["profiles"][0]["samples"]
    assert col.read_text().strip()


def test_cli_json_and_errors(known: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = known[0]
    assert cli_main(["python", str(path), "--no-cache", "--json", "--step", "3",
                     "--filter", "heavy"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["step"] == 3 and data["functions"]["function"] == ["heavy"]
    assert data["count_kind"] == "calls"
    assert cli_main(["python", str(path), "--no-cache", "--thread", "nope"]) == 2
    assert "No thread 'nope'" in capsys.readouterr().err
    assert cli_main(["python", str(path), "--no-cache", "--step", "12345"]) == 2
    assert cli_main(["python", str(path), "--no-cache", "--limit", "3"]) == 0
    out = capsys.readouterr().out
    assert "heavy" in out and "program.py:" in out


def test_threads_are_apart(tmp_path: Path) -> None:
    path = _run(tmp_path, THREADS, 1, 400, 20_000)
    table = load(path, use_cache=False).hosts
    (host, t), = table.items()
    for source in ("tracer", "sampler"):
        views = python_views(t, host, source=source, thread="worker")
        s = _shares(views, ["spin_a", "spin_b", "spin_c"])
        assert "spin_c" not in s
        err = s["spin_a"][3]
        assert abs(s["spin_a"][0] - 0.75) < _tolerance(err, 0.06), (source, s)
        assert abs(s["spin_b"][0] - 0.25) < _tolerance(err, 0.06), (source, s)
        both = python_views(t, host, source=source)
        assert {"worker", "other"} <= set(both.threads["name"])
        assert "spin_c" in _shares(both, ["spin_c"])
    with pytest.raises(NotFoundError, match="No thread"):
        python_views(t, host, thread="nobody")


def test_collate_function_is_found(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    path = _run(tmp_path, COLLATE, 1, 400, 20_000)
    profile = load(path, use_cache=False)
    (host, table), = profile.hosts.items()
    t0, t1 = _window_of_steps(profile, host)
    for source in ("tracer", "sampler"):
        views = python_views(table, host, source=source, thread="MainThread", start_ns=t0,
                             end_ns=t1)
        s = _shares(views, ["slow_collate", "train_step"])
        err = s["slow_collate"][3]
        assert abs(s["slow_collate"][0] - 0.75) < _tolerance(err, 0.08), (source, s)
        assert abs(s["train_step"][0] - 0.25) < _tolerance(err, 0.08), (source, s)
    # The run model keeps each step's Python time and the heaviest functions; the advice
    # names the collate function.
    model = run_model_of(profile, use_cache=False)
    summary = model.python_dict()[host]
    assert summary["top"]["function"][0] == "slow_collate"
    steps = model.hosts[host].steps
    python_share = np.array(summary["step_python_ns"]) / steps.duration_ns
    assert summary["thread"] == "MainThread" and np.median(python_share) > 0.8
    advice = {r.rule: r for r in recommendations(model)}
    rule = advice["python_input_function"]
    assert rule.evidence["function"] == "slow_collate" and "num_workers" in rule.text
    assert abs(rule.evidence["percent_of_python_time"] - 75) < 10


def test_no_advice_without_an_input_function(known: Any) -> None:
    _, profile, host, _ = known
    model = run_model_of(profile, use_cache=False)
    assert model.python_dict()[host]["top"]["function"][0] == "heavy"
    assert "python_input_function" not in {r.rule for r in recommendations(model)}


def test_no_python_data_is_one_clear_error(tmp_path: Path) -> None:
    import stepscope

    with stepscope.Profile(tmp_path, stepscope.ProfilerOptions(counter_interval_ms=0)) as p:
        with stepscope.Trace("x"):
            pass
    assert p.path is not None
    tables = load(p.path, use_cache=False).hosts
    with pytest.raises(PythonDataError, match="no Python calls or samples"):
        run_python_views(tables, {})
    assert cli_main(["python", str(p.path), "--no-cache"]) == 2


def test_sampler_names_c_functions_and_leaves_its_own_thread_out(tmp_path: Path) -> None:
    import threading
    import time

    import stepscope

    stop = threading.Event()
    waiter = threading.Thread(target=lambda: stop.wait(), name="waiter")
    waiter.start()
    opts = stepscope.ProfilerOptions(python_sampling_hz=200, counter_interval_ms=0)
    with stepscope.Profile(tmp_path, opts) as p:
        until = time.monotonic() + 0.3
        while time.monotonic() < until:
            time.sleep(0.002)
    stop.set()
    waiter.join()
    assert p.path is not None
    (host, table), = load(p.path, use_cache=False).hosts.items()
    views = python_views(table, host)
    assert views.source == "sampler"
    assert "stepscope-python-sampler" not in views.threads["name"]
    assert "waiter" in views.threads["name"]
    names = views.functions()["name"]
    assert "$time.sleep" in names  # a C function, named as the tracer names it
    assert any(n.startswith("$") and "Event.wait" in n for n in names)


def test_sampler_rate_and_option_checks() -> None:
    import stepscope
    from stepscope.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="python_sampling_hz"):
        stepscope.ProfilerOptions(python_sampling_hz=-1)
    with pytest.raises(InvalidOptionError, match="python_sampling_hz"):
        stepscope.ProfilerOptions(python_sampling_hz=10**6)


def test_split_frame() -> None:
    assert split_frame("$a b.py:12 Cls.meth") == ("a b.py", 12, "Cls.meth")
    assert split_frame("$time.sleep") == ("", 0, "time.sleep")
    assert split_frame("plain") == ("", 0, "plain")


def test_recursion_counted_once_on_a_synthetic_tree() -> None:
    """A deep recursion: inclusive time of the recursive function is its outermost call's."""
    from stepscope.analysis.python_views import CallTree, PythonViews

    # a → f → f → f → g: f's inclusive is the outer f's total.
    parent = np.array([-1, 0, 1, 2, 3], np.int64)
    name = np.array([0, 1, 1, 1, 2], np.int64)
    self_ns = np.array([10, 5, 5, 5, 75], np.int64)
    total = np.array([100, 90, 85, 80, 75], np.int64)
    tree = CallTree(parent, name, self_ns, total, np.ones(5, np.int64), ["$a", "$f", "$g"])
    views = PythonViews("h", "tracer", 0, 100, None, None, {}, tree, 5, 0.0)
    f = views.functions()
    i = f["name"].index("$f")
    assert f["total_ns"][i] == 90 and f["self_ns"][i] == 15 and f["count"][i] == 3
    assert math.isclose(sum(f["self_share"]), 1.0)
