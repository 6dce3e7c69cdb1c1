"""``stepscope.open(path) -> Run``: the one door. For every tool on every fixture that offers
it, the command line's ``--json``, the web API's ``/api/data`` and ``Run.tool(...).to_dict()``
are the same JSON; the declarations check parameters the same way everywhere."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import stepscope
from stepscope.cli import main
from stepscope.errors import InvalidParameterError, NotFoundError
from stepscope.model.run_tables import LazyTables
from stepscope.run.tools import TOOLS
from stepscope.web.app import create_app

from conftest import FIXTURES
from workloads import make_stepscope_run

# One run of each kind: stepscope's own capture, JAX on AMD GPUs (XLA programs and their HLO),
# TensorFlow on 8 V100s, PyTorch on an H100, and 8 PyTorch ranks (several hosts).
KINDS = {
    "jax_mi300": FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb",
    "tf_v100": FIXTURES / ("xprof/demo/plugins/profile/GPU-multi-worker/"
                           "34.83.195.179_6003.xplane.pb"),
    "torch_h100": FIXTURES / ("TraceLens/tests/traces/h100/"
                              "gaunernst_bert-small-uncased__1016001.json.gz"),
    "dlrm_8_ranks": FIXTURES / "param/et_replay/tests/inputs/dlrm_kineto",
}
# Named commands and the tool each one answers (with the arguments that give its defaults).
COMMANDS = {
    "report": ("overview_page", []), "ops": ("framework_op_stats", []),
    "kernels": ("kernel_stats", []), "input": ("input_pipeline_analyzer", []),
    "pod": ("pod_viewer", []), "memory": ("memory_profile", []),
    "xla": ("op_profile", []), "memory-viewer": ("memory_viewer", []),
    "xla-graph": ("graph_viewer", []),
}
# Tools asked with parameters (the defaults of the others are used).
PARAMS: dict[str, dict[str, str]] = {"trace_search": {"q": "a"},
                                     "trace_window": {"width": "200"}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Each kind as a run directory of its own (the API serves the directory as one run)."""
    import os

    root = tmp_path_factory.mktemp("runs")
    os.environ["STEPSCOPE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    out = {}
    for kind, source in KINDS.items():
        target = root / kind
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            target.mkdir()
            shutil.copy(source, target / source.name)
        out[kind] = target
    own = make_stepscope_run(root / "own_logs")
    out["stepscope"] = own
    yield out
    del os.environ["STEPSCOPE_CACHE_DIR"]


def _api(client: TestClient, tool: str, host: str | None,
         params: dict[str, str]) -> dict[str, Any]:
    """GET /api/data for the run the client serves, asking again while it loads (202)."""
    run = client.get("/api/runs").json()["runs"][0]["name"]
    query = {"run": run, "tool": tool, **params, **({"host": host} if host else {})}
    for _ in range(2400):
        reply = client.get("/api/data", params=query)
        body: dict[str, Any] = reply.json()
        # The trace viewer answers coarsely (202 or "coarse") while its index builds: wait for
        # the final answer, never take the first.
        if reply.status_code == 200 and not body.get("coarse"):
            return body
        assert reply.status_code in (200, 202), reply.text
        time.sleep(0.05)
    raise AssertionError(f"{tool} never answered")


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(list(argv)) == 0, capsys.readouterr().err
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


@pytest.mark.parametrize("kind", [*KINDS, "stepscope"])
def test_every_tool_answers_the_same_json_through_every_door(
        kind: str, runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = runs[kind]
    run = stepscope.open(path)
    offered = run.available_tools()
    assert {"overview_page", "framework_op_stats", "steps"} <= set(offered)
    host = run.hosts[-1] if len(run.hosts) > 1 else None
    with TestClient(create_app(path), base_url="http://127.0.0.1") as client:
        _api(client, "overview_page", None, {})  # loaded: tools that need the model listed
        listed = {t["name"] for t in client.get(
            "/api/tools", params={"run": client.get("/api/runs").json()["runs"][0]["name"]}
        ).json()["tools"]}
        assert listed == {t for t in offered if TOOLS[t].page}
        for name in offered:
            if any(p.required for p in TOOLS[name].params):
                continue  # (diff, which needs another run, has tests of its own)
            params = PARAMS.get(name, {})
            for which in (None, host) if host else (None,):
                want = run.tool(name, which, **params).to_dict()
                argv = ["tool", name, str(path), *(f"--param={k}={v}" for k, v in
                                                    params.items())]
                assert _cli(capsys, *argv, *(["--host", which] if which else [])) == want, name
                assert _api(client, name, which, params) == want, name
    for command, (name, extra) in COMMANDS.items():
        if name in offered:
            assert _cli(capsys, command, str(path), "--json", *extra) == \
                run.tool(name).to_dict(), command


def test_results_are_tables_and_dataframes(runs: dict[str, Path]) -> None:
    run = stepscope.open(runs["torch_h100"])
    ops = run.op_stats()
    table = ops.table()
    rows = ops.to_dict()["ops"]
    assert len(table["name"]) == len(rows) > 0 and table["name"][0] == rows[0]["name"]
    frame = ops.to_pandas()
    assert list(frame["self_ms"]) == [r["self_ms"] for r in rows]
    arrow = run.kernel_stats().to_arrow()
    assert arrow.num_rows == len(run.kernel_stats().to_dict()["rows"]) > 0
    steps = run.steps.to_pandas()
    assert len(steps) == sum(len(run.model.hosts[h].steps) for h in run.hosts) > 0
    assert list(steps.columns) == ["host", "step", "start_ns", "end_ns", "duration_ms"]
    assert ops.to_csv().splitlines()[0].startswith("host_or_device,type,name")
    # Answers are kept: the same object for the same question.
    assert run.op_stats() is ops


def _fib(n: int) -> int:
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def test_a_kept_answer_is_read_back_without_the_hosts_tables(runs: dict[str, Path],
                                                              tmp_path: Path) -> None:
    """The tools whose answers are kept (the trace tools and the Python profile among them)
    answer a later open of the same files from the cache alone: no host's table is read, and
    the answer is the one computed first."""
    options = stepscope.ProfilerOptions(python_tracer_level=1, counter_interval_ms=0)
    with stepscope.Profile(tmp_path / "logs", options=options) as prof:
        for i in range(4):
            with stepscope.Trace("train", step_num=i, _r=1):
                _fib(12)
    assert prof.path is not None
    path = prof.path if prof.path.is_dir() else prof.path.parent
    first = stepscope.open(path)
    kept = [t for t in first.available_tools() if TOOLS[t].keep]
    assert {"trace_viewer", "trace_window", "trace_search", "trace_summary",
            "python_profile", "overview_page"} <= set(kept)
    answers = {t: first.tool(t, **PARAMS.get(t, {})).to_dict() for t in kept}
    assert first.tables.hosts.loaded()  # computing them read the table
    again = stepscope.open(path)
    for name in kept:
        assert again.tool(name, **PARAMS.get(name, {})).to_dict() == answers[name], name
    assert isinstance(again.tables.hosts, LazyTables) and again.tables.hosts.loaded() == []
    # another window is another question: computed, from the table
    span = answers["trace_viewer"]["span_ns"]
    window = again.tool("trace_window", start_ns=span // 3, end_ns=span // 2, width=100)
    assert window.to_dict() != answers["trace_window"] and again.tables.hosts.loaded()


def test_parameters_are_checked_by_the_declaration(runs: dict[str, Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    run = stepscope.open(runs["jax_mi300"])
    with pytest.raises(InvalidParameterError, match="depth must be between 0 and 20"):
        run.tool("graph_viewer", depth=99)
    with pytest.raises(InvalidParameterError, match="no parameter 'colour'"):
        run.tool("op_profile", colour="red")
    with pytest.raises(InvalidParameterError, match="must be true or false"):
        run.tool("framework_op_stats", include_idle="maybe")
    with pytest.raises(NotFoundError, match="No host 'nowhere' in run"):
        run.op_stats("nowhere")
    with pytest.raises(NotFoundError, match="No tool 'opstats'"):
        run.tool("opstats")
    # The same sentence from the command line (exit 2) and from the API (400).
    assert main(["tool", "graph_viewer", str(runs["jax_mi300"]), "--param", "depth=99"]) == 2
    assert "depth must be between 0 and 20" in capsys.readouterr().err
    with TestClient(create_app(runs["jax_mi300"]), base_url="http://127.0.0.1") as client:
        name = client.get("/api/runs").json()["runs"][0]["name"]
        reply = client.get("/api/data", params={"run": name, "tool": "graph_viewer",
                                                "depth": "99"})
        assert reply.status_code == 400 and "between 0 and 20" in reply.json()["error"]


def test_a_tool_without_data_says_so(runs: dict[str, Path]) -> None:
    run = stepscope.open(runs["torch_h100"])
    assert "op_profile" not in run.available_tools()
    with pytest.raises(NotFoundError, match="needs XLA programs"):
        run.op_profile()


def test_open_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(stepscope.StepscopeError, match="does not exist"):
        stepscope.open(tmp_path / "nothing")
    (tmp_path / "bad.xplane.pb").write_bytes(b"\xff" * 100)
    with pytest.raises(stepscope.StepscopeError):
        stepscope.open(tmp_path / "bad.xplane.pb").overview()


def test_tools_command_lists_every_declaration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in listed] == list(TOOLS)
    assert all(isinstance(t["params"], list) for t in listed)
