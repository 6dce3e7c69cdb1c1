"""Comparing runs and the regression gate: real runs recorded here (the same program twice,
with a regression injected into one op, with a memory regression), real fixtures across
formats and hosts, summary.json round trips and old versions, hostile input."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import stepscope
from stepscope.analysis.tools.run_diff import (
    DEFAULT_BOUNDS,
    BoundError,
    check,
    diff,
    parse_bound,
    shift,
)
from stepscope.analysis.tools.run_summary import (
    SUMMARY_VERSION,
    RunSummary,
    SummaryError,
)
from stepscope.analysis.xla.memory_viewer import memory_viewer_of
from stepscope.cli import main
from stepscope.cli.summary import summarize_run
from stepscope.run.loader import open_hlo_programs, open_run_model

from conftest import FIXTURES
from workloads import record_numpy_steps as record

pytestmark = pytest.mark.usefixtures("cache_home")

STEPS = 30
DATA = Path(__file__).parent / "data"
JAX_NEW = FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb"
JAX_OLD = next((FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_legacy").glob(
    "*.xplane.pb"))
BERT_H100 = FIXTURES / "TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
BERT_MI300 = FIXTURES / "TraceLens/tests/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz"
DLRM = FIXTURES / "param/et_replay/tests/inputs/dlrm_kineto"


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessPoolExecutor]:
    """Two worker processes, so that the two runs of a pair are recorded at the same time and
    see the same machine: on a machine shared with other work, two runs recorded one after
    the other see different loads, a difference no gate can tell from a slower program."""
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        # Both workers started and warm (imports done) before any recording.
        warm = [pool.submit(time.sleep, 1.0) for _ in range(2)]
        for f in warm:
            f.result(timeout=300)
        list(pool.map(record, [tmp_path_factory.mktemp("warm") for _ in range(2)],
                      timeout=300))
        yield pool


def record_pair(pool: ProcessPoolExecutor, base: Path, new: Path,
                slow_forward_s: float = 0.0) -> tuple[RunSummary, RunSummary]:
    """The summaries of two runs of the program recorded at the same time (``new`` with
    ``slow_forward_s`` injected into its op ``forward``)."""
    start = time.time() + 0.2  # both begin together, whenever each worker gets the task
    a = pool.submit(record, base, start_at=start)
    b = pool.submit(record, new, slow_forward_s=slow_forward_s, start_at=start)
    return summary_of(a.result(timeout=300)), summary_of(b.result(timeout=300))


def summary_of(path: Path) -> RunSummary:
    summary: RunSummary = stepscope.open(path, cache=False).summary().value
    return summary


def run_cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_exit_2(code: int, err: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("stepscope: error: "), err


def assert_fits(text: str, width: int = 100) -> None:
    assert max(len(line) for line in text.splitlines()) <= width, text


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, workers: ProcessPoolExecutor
         ) -> tuple[Path, Path]:
    """A baseline and, recorded at the same time, the program with 3 ms more in ``forward``."""
    base, slow = tmp_path_factory.mktemp("base"), tmp_path_factory.mktemp("slow")
    record_pair(workers, base, slow, slow_forward_s=0.003)
    return base, slow


@pytest.fixture(scope="module")
def baseline(pair: tuple[Path, Path]) -> Path:
    return pair[0]


@pytest.fixture(scope="module")
def regressed(pair: tuple[Path, Path]) -> Path:
    return pair[1]


# -- the statistics -----------------------------------------------------------------------------


def test_shift_interval_covers_a_known_shift_and_refuses_too_few_steps() -> None:
    rng = np.random.default_rng(1)
    base = 10 + rng.standard_normal(200) * 0.5
    s = shift(base, base + 1.0 + rng.standard_normal(200) * 0.01)
    assert s.ci_ms is not None and s.ci_ms[0] < 1.0 < s.ci_ms[1] + 0.05
    assert s.verdict == "slower" and s.percent == pytest.approx(10, abs=1)
    same = shift(base, base[::-1])
    assert same.verdict == "no change" and same.delta_ms == pytest.approx(0, abs=0.1)
    few = shift([1.0, 2.0, 3.0], [5.0, 6.0, 7.0])
    assert few.ci_ms is None and few.verdict == "unknown"


# -- real runs: the same program twice, a regression, a memory regression ------------------------


def test_the_same_program_twice_never_fails_the_gate(
        tmp_path: Path, workers: ProcessPoolExecutor) -> None:
    verdicts = []
    bounds = [*DEFAULT_BOUNDS, "op:forward=+20%", "op:load_batch=+20%"]
    for i in range(20):
        base, new = record_pair(workers, tmp_path / f"a{i}", tmp_path / f"b{i}")
        result = check(new, base, bounds)
        assert result.passed, [item.explanation for item in result.items]
        assert result.exit_code == 0
        verdicts.append(result.diff.step.verdict)
    assert set(verdicts) <= {"no change", "slower", "faster"}  # an interval every time


def test_a_regression_in_one_op_fails_and_names_that_op_first(
        baseline: Path, regressed: Path, tmp_path: Path, capsys: Any) -> None:
    result = check(summary_of(regressed), summary_of(baseline))
    assert not result.passed
    (step,) = [i for i in result.items if i.bound.metric == "step_time"]
    assert step.failed and step.beyond_noise and step.percent is not None
    assert step.percent > 20  # 3 ms on top of ~5.2 ms (a busy machine adds to both)
    assert result.culprits[0].name == "forward"
    assert result.diff.ops[0].name == "forward"
    assert result.diff.ops[0].delta > 2.9  # the 3 ms sleep, and what a busy machine adds
    # Through the command line, with a bound on the op itself and the CI reports.
    junit, md = tmp_path / "check.xml", tmp_path / "check.md"
    code, out, err = run_cli(capsys, "check", str(regressed), "--baseline", str(baseline),
                             "--max", "step_time=+5%", "--max", "op:forward=+20%",
                             "--junit", str(junit), "--markdown", str(md))
    assert code == 1, err
    assert_fits(out)
    assert "FAIL step time" in out and "FAIL op forward" in out
    culprits = out.split("Most of the slower step is in:")[1].splitlines()
    assert culprits[1].strip().startswith("op forward:")
    assert 'failures="2"' in junit.read_text() and "op:forward" in junit.read_text()
    assert "❌ failed" in md.read_text() and "`forward`" in md.read_text()
    code, out, _ = run_cli(capsys, "diff", str(baseline), str(regressed))
    assert code == 0 and "SLOWER" in out
    assert_fits(out)
    ops = out.split("Ops (ms per step")[1].splitlines()
    assert ops[2].split()[0] == "forward"


def test_a_regression_inside_the_noise_or_with_too_few_steps_passes_and_says_so(
        baseline: Path) -> None:
    real = summary_of(baseline)
    median = float(np.median(real.step_ms))
    # The real run with steady step times, against one whose steps scatter widely around
    # +12% (fixed seeds): beyond the bound, but its interval holds zero.
    steady = np.random.default_rng(5).uniform(0.99, 1.01, len(real.step_ms))
    base = replace(real, step_ms=tuple(float(x) for x in median * steady))
    factors = np.random.default_rng(1).uniform(0.6, 1.7, len(real.step_ms))
    noisy = replace(real, step_ms=tuple(float(x) for x in median * factors))
    result = check(noisy, base, ["step_time=+5%"])
    (item,) = result.items
    assert item.percent is not None and item.percent > 5 and item.beyond_noise is False
    assert result.passed and "inside the noise; not failed" in item.explanation
    # Three steps a side: no interval, so no failure, and the report says why.
    few = replace(base, step_ms=tuple(x * 2 for x in base.step_ms[:3]),
                  step_num=base.step_num[:3])
    result = check(few, replace(base, step_ms=base.step_ms[:3], step_num=base.step_num[:3]))
    (item, _) = result.items
    assert result.passed and "too few steps" in item.explanation
    assert any("Too few steps" in n for n in result.diff.notes)


def test_an_op_regression_fails_only_when_the_step_shows_it(baseline: Path) -> None:
    """A small op's mean moves by a fifth with the machine's load while the step barely
    moves (a CI run failed so): its regression is confirmed only when the step surely got
    slower by at least half as much."""
    real = summary_of(baseline)
    (fwd,) = [o for o in real.ops if o.name == "forward"]
    median = float(np.median(real.step_ms))
    steady = np.random.default_rng(5).uniform(0.9999, 1.0001, len(real.step_ms))
    base = replace(real, step_ms=tuple(float(x) for x in median * steady))

    def slower(step_ms: float, forward_ms: float) -> RunSummary:
        ops = tuple(replace(o, ms_per_step=o.ms_per_step + forward_ms) if o is fwd else o
                    for o in real.ops)
        return replace(base, step_ms=tuple(x + step_ms for x in base.step_ms), ops=ops)

    # +100% or more, far beyond the step's noise and the noise between runs (3% of the step)
    grow = max(fwd.ms_per_step, 0.2, 0.06 * median)
    bound = ["op:forward=+20%"]
    barely = check(slower(0.2 * grow, grow), base, bound)  # the step surely slower, a little
    assert barely.diff.step.ci_ms is not None and barely.diff.step.ci_ms[0] > 0.1 * grow
    (item,) = barely.items
    assert item.beyond_noise and item.percent is not None and item.percent > 20
    assert barely.passed and "by half as much (at least +" in item.explanation
    shown = check(slower(grow, grow), base, bound)
    assert not shown.passed and shown.items[0].failed
    assert "beyond noise and beyond the bound" in shown.items[0].explanation
    # The noise between two runs (a CI run failed so): the whole process 2% slower, its small
    # op +70%, both beyond the step's own interval; under 3% of the step, not beyond noise.
    small = 0.02 * median
    between = check(slower(small, min(small, 0.7 * fwd.ms_per_step)), base, bound)
    assert between.diff.step.ci_ms is not None and between.diff.step.ci_ms[0] > 0
    (item,) = between.items
    assert between.passed and not item.beyond_noise and "inside the noise" in item.explanation


def test_a_faster_run_passes(baseline: Path, regressed: Path) -> None:
    result = check(summary_of(baseline), summary_of(regressed))
    assert result.passed and result.diff.step.verdict == "faster"
    assert not result.culprits


def test_a_memory_regression_fails_the_memory_bound(tmp_path: Path, capsys: Any) -> None:
    base = record(tmp_path / "small", memory=True)
    new = record(tmp_path / "big", memory=True, big=True)
    b, n = summary_of(base), summary_of(new)
    (alloc,) = b.memory
    assert alloc.peak_bytes >= 2 * 20_000 * 8  # h and g, float64
    assert n.memory[0].peak_bytes >= 2 * 200_000 * 8
    result = check(n, b, ["peak_memory=+10%"])
    (item,) = result.items
    assert item.failed and item.beyond_noise and item.percent is not None and item.percent > 100
    same = check(summary_of(record(tmp_path / "again", memory=True)), b, ["peak_memory=+10%"])
    assert same.passed, [i.explanation for i in same.items]
    code, out, _ = run_cli(capsys, "check", str(new), "--baseline", str(base),
                           "--max", "peak_memory=+10%")
    assert code == 1 and "FAIL peak memory of" in out


# -- summary.json ------------------------------------------------------------------------------


def test_summary_json_round_trips_and_diffs_like_the_run(
        baseline: Path, regressed: Path, tmp_path: Path, capsys: Any) -> None:
    out_file = tmp_path / "summary.json"
    code, _, err = run_cli(capsys, "summary", str(baseline), "-o", str(out_file),
                           "--software", "numpy=" + np.__version__)
    assert code == 0, err
    data = json.loads(out_file.read_text())
    assert data["schema"] == "stepscope.run_summary" and data["version"] == SUMMARY_VERSION
    loaded = RunSummary.from_dict(data)
    again = summary_of(baseline)
    assert loaded.step_ms == again.step_ms and loaded.ops == again.ops
    assert loaded.versions == {"numpy": np.__version__} and loaded.framework == "Python"
    assert RunSummary.from_dict(json.loads(json.dumps(loaded.to_dict()))) == loaded
    assert len(loaded.step_ms) == STEPS  # stepscope's own captures keep every whole step
    # The op times per step are the op stats' self times over the steps.
    ops = open_run_model(baseline, use_cache=False).op_stats()
    (fwd,) = [r for r in ops.rows if r.name == "forward"]
    (mine,) = [o for o in loaded.ops if o.name == "forward"]
    assert mine.ms_per_step == pytest.approx(fwd.self_ns / 1e6 / len(loaded.step_ms))
    # Either side may be a summary: the same answer as from the runs.
    code, out, _ = run_cli(capsys, "diff", str(out_file), str(regressed), "--json")
    from_summary = json.loads(out)
    code2, out2, _ = run_cli(capsys, "diff", str(baseline), str(regressed), "--json")
    assert code == code2 == 0
    assert from_summary["step_time"] == json.loads(out2)["step_time"]


def test_an_old_version_summary_still_loads(capsys: Any, baseline: Path) -> None:
    old = json.loads((DATA / "summary_v1.json").read_text())
    assert old["version"] == 1
    s = RunSummary.from_dict(old)
    assert s.run == "baseline_v1" and s.hosts == {"vm": s.step_ms}
    assert s.straggler is None and s.programs == ()
    code, out, err = run_cli(capsys, "check", str(baseline), "--baseline",
                             str(DATA / "summary_v1.json"))
    assert code in (0, 1), err
    assert "base baseline_v1" in out


# -- formats and hosts ---------------------------------------------------------------------------


def test_xspace_against_xspace() -> None:
    old, new = summary_of(JAX_OLD), summary_of(JAX_NEW)
    assert old.framework == new.framework == "JAX"
    d = diff(old, new)
    # Both runs ran the same program (a 3-D convolution); the newer JAX names its op
    # differently (no jit(main) scope) and ROCm its kernels (".kd"): removed and added.
    status = {c.name: c.status for c in d.ops}
    assert status["jit(forward_3d_conv)/jit(main)/conv_general_dilated"] == "removed"
    assert status["jit(forward_3d_conv)/conv_general_dilated"] == "added"
    assert status["x"] == status["kernel"] == "slower"
    kernels = {c.name: c.status for c in d.kernels}
    assert kernels["input_transpose_fusion"] == "removed"
    assert kernels["input_transpose_fusion.kd"] == "added"
    assert d.step.delta_ms is None or d.step.ci_ms is None  # no steps: no interval
    assert d.notes
    peaks = {c.name for c in d.memory}
    assert peaks and all(c.base is not None and c.new is not None for c in d.memory)


def test_xla_program_peaks_are_summarised() -> None:
    tpu = FIXTURES / "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb"
    s = summarize_run(str(tpu), use_cache=False)
    # Its XLA ops' metadata names JAX's ops (jit(f)/jit(main)/add), as XProf's op stats show.
    assert s.framework == "JAX" and s.device_type == "TPU" and s.device_count == 4
    peaks = {p.name: p.peak_bytes for p in s.programs}
    want = memory_viewer_of(open_hlo_programs(tpu), "jit_f").peak_heap_bytes
    assert peaks["jit_f"] == want
    changed = replace(s, programs=tuple(replace(p, peak_bytes=p.peak_bytes * 2)
                                        if p.name == "jit_f" else p for p in s.programs))
    (item, *_) = [i for i in check(changed, s, ["peak_memory=+10%"]).items if i.failed]
    assert item.what == "peak heap of XLA program jit_f"


def test_kineto_against_kineto_across_gpus(capsys: Any) -> None:
    h100, mi300 = summary_of(BERT_H100), summary_of(BERT_MI300)
    assert h100.framework == mi300.framework == "PyTorch"
    d = diff(h100, mi300)
    assert "device_names" in d.environment
    status = {c.name: c.status for c in d.kernels}
    # NVIDIA's kernels are gone on the AMD GPU, AMD's are new.
    assert any(n.startswith("void cutlass") and s == "removed" for n, s in status.items())
    assert any(n.startswith("Cijk_") and s == "added" for n, s in status.items())
    (addmm,) = [c for c in d.ops if c.name == "aten::addmm"]
    ref = open_run_model(BERT_H100, use_cache=False).op_stats()
    (row,) = [r for r in ref.rows if r.name == "aten::addmm"]
    assert addmm.base == pytest.approx(row.self_ns / 1e6 / h100.step_count)
    code, out, _ = run_cli(capsys, "diff", str(BERT_H100), str(BERT_MI300))
    assert code == 0 and "too few steps to tell it from noise" in out
    assert_fits(out)


def test_across_hosts_the_dlrm_ranks(tmp_path: Path, capsys: Any) -> None:
    full = summary_of(DLRM)
    assert len(full.hosts) == 8 and full.straggler is not None
    same = diff(full, full)
    assert len(same.hosts) == 8 and all(h.shift.delta_ms == 0 for h in same.hosts)
    assert same.straggler == (full.straggler, full.straggler)
    assert all(c.delta == 0 for c in [*same.ops, *same.kernels, *same.breakdown])
    half = tmp_path / "four_ranks"
    half.mkdir()
    for f in sorted(DLRM.glob("*.json.gz"))[:4]:
        shutil.copy(f, half / f.name)
    part = summary_of(half)
    d = diff(full, part)
    assert d.environment["hosts"] == [8, 4]
    assert len(d.hosts) == 4
    ov = open_run_model(DLRM, use_cache=False).overview_dict()
    for h in d.hosts:
        mine = [s["ms"] for s in ov["hosts"][h.host]["steps"]["per_step"]]
        assert h.shift.base.median == pytest.approx(float(np.median(mine)))
    code, out, _ = run_cli(capsys, "diff", str(DLRM), str(half))
    assert code == 0 and "most often the straggler" in out
    assert_fits(out)


# -- hostile input -------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [
    b"", b"\x00\xff garbage", b'{"schema": "stepscope.run_summary"', b"[1, 2, 3]",
    b'{"schema": "other"}', b'{"schema": "stepscope.run_summary", "version": 99}',
    b'{"schema": "stepscope.run_summary", "version": 2, "run": "x"}',
    b'{"schema": "stepscope.run_summary", "version": true}',
    b"[" * 100_000,
])
def test_garbage_summary_gives_one_line_and_exit_2(
        content: bytes, baseline: Path, tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / "summary.json"
    bad.write_bytes(content)
    code, _, err = run_cli(capsys, "check", str(baseline), "--baseline", str(bad))
    assert_one_line_exit_2(code, err)
    code, _, err = run_cli(capsys, "diff", str(bad), str(baseline))
    assert_one_line_exit_2(code, err)


def test_a_summary_with_absurd_values_is_refused(baseline: Path) -> None:
    good = summary_of(baseline).to_dict()
    for damage in ({"steps": {"step_num": [1], "ms": [float("nan")]}},
                   {"steps": {"step_num": [1, 2], "ms": [1.0]}},
                   {"ops": {"truncated": False, "rows": [{"name": "x"}]}},
                   {"memory": [{"name": "a", "peak_bytes": "lots"}]}):
        with pytest.raises(SummaryError):
            RunSummary.from_dict({**good, **damage})


@pytest.mark.parametrize("expr", [
    "step_time", "step_time=5", "step_time=+5", "step_time=-5%", "foo=+5%", "op:=+5%",
    "step_time=+1e999%", "step_time=+200000%", "peak_memory=+10% extra", "x" * 5000,
])
def test_bad_bounds_give_one_line_and_exit_2(expr: str, baseline: Path, capsys: Any) -> None:
    with pytest.raises(BoundError):
        parse_bound(expr)
    code, _, err = run_cli(capsys, "check", str(baseline), "--baseline", str(baseline),
                           "--max", expr)
    assert_one_line_exit_2(code, err)


def test_a_bound_on_an_op_neither_run_has_is_a_usage_error(baseline: Path, capsys: Any) -> None:
    code, _, err = run_cli(capsys, "check", str(baseline), "--baseline", str(baseline),
                           "--max", "op:no_such_op=+5%")
    assert_one_line_exit_2(code, err)
    assert "forward" in err  # it names the ops there are


def test_bad_software_versions_and_missing_runs(baseline: Path, tmp_path: Path,
                                                capsys: Any) -> None:
    code, _, err = run_cli(capsys, "summary", str(baseline), "--software", "torch")
    assert_one_line_exit_2(code, err)
    code, _, err = run_cli(capsys, "diff", str(tmp_path / "nothing"), str(baseline))
    assert_one_line_exit_2(code, err)
