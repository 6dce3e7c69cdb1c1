"""``stepscope mcp``: the tools as an MCP server, driven by the MCP SDK's own client over
stdio (``python -m stepscope mcp LOGDIR`` in a subprocess, one per logdir, reused).

Every declared tool is listed with its schema and answered on real runs (TensorFlow on V100s,
JAX on MI300, PyTorch on an H100, 8 PyTorch ranks); each answer is ``Run.tool(...).to_dict()``
cut to the answer's limits (and equal to it when nothing was left out), and fits the bound.
Hostile parameters, names that leave the logdir and capture without ``--allow-capture`` are
one-line refusals."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

import stepscope  # noqa: E402
from stepscope.cli import main  # noqa: E402
from stepscope.mcp.answers import BUDGET_BYTES, META_KEYS  # noqa: E402
from stepscope.run.tools import TOOLS  # noqa: E402

from conftest import FIXTURES  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"
KINDS = {
    "tf_v100": FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker",
    "jax_mi300": FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08",
    "torch_h100": FIXTURES / "TraceLens/tests/traces/h100",
    "dlrm_8_ranks": FIXTURES / "param/et_replay/tests/inputs/dlrm_kineto",
}
PARAMS: dict[str, dict[str, Any]] = {"trace_search": {"q": "a"}}
OWN = {"list_runs", "list_hosts", "capture"}


class McpServer:
    """One ``stepscope mcp`` subprocess and the SDK's client to it, callable from tests."""

    def __init__(self, logdir: Path, cache: Path, *flags: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(SRC), "STEPSCOPE_CACHE_DIR": str(cache)}
        self.params = StdioServerParameters(command=sys.executable,
                                            args=["-m", "stepscope", "mcp", str(logdir), *flags],
                                            env=env)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._done = asyncio.run_coroutine_threadsafe(self._main(), self.loop)
        while not self._ready.wait(0.1):
            if self._done.done():
                self._done.result()  # the server failed to start: raise why
        assert self.client is not None

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        try:
            async with Client(self.params, read_timeout_seconds=600) as client:
                self.client = client
                self._ready.set()
                await self._stop.wait()
        finally:
            self._ready.set()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=900)

    def tools(self) -> list[Any]:
        assert self.client is not None
        return list(self.run(self.client.list_tools()).tools)

    def call(self, name: str, args: dict[str, Any] | None = None) -> tuple[bool, Any]:
        """(is_error, the answer as JSON, or the error's text)."""
        assert self.client is not None
        result = self.run(self.client.call_tool(name, args or {}))
        (content,) = result.content
        if result.is_error:
            return True, content.text
        assert result.structured_content == json.loads(content.text)
        assert len(content.text.encode()) <= BUDGET_BYTES, (name, len(content.text.encode()))
        return False, json.loads(content.text)

    def answer(self, name: str, args: dict[str, Any] | None = None) -> Any:
        error, answer = self.call(name, args)
        assert not error, answer
        return answer

    def refusal(self, name: str, args: dict[str, Any] | None = None) -> str:
        error, text = self.call(name, args)
        assert error, (name, args, text)
        assert isinstance(text, str) and "\n" not in text and "Traceback" not in text, text
        assert 0 < len(text) <= 400, text
        return text

    def close(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._done.result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixtures as runs of one logdir, and a run outside it that a link points to."""
    root = tmp_path_factory.mktemp("mcp") / "logs"
    profile = root / "plugins" / "profile"
    for kind, source in KINDS.items():
        target = profile / kind
        if kind == "torch_h100":
            target.mkdir(parents=True)
            shutil.copy(source / "gaunernst_bert-small-uncased__1016001.json.gz", target)
        else:
            shutil.copytree(source, target)
        for f in target.iterdir():
            f.chmod(0o644)
    qwen = profile / "qwen_h100"  # docs/agents.md compares it with torch_h100
    qwen.mkdir()
    shutil.copy(KINDS["torch_h100"] / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", qwen)
    outside = root.parent / "outside" / "secret_run"
    shutil.copytree(KINDS["jax_mi300"], outside)
    (profile / "linked").symlink_to(outside, target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("mcp_cache")
    before = os.environ.get("STEPSCOPE_CACHE_DIR")
    os.environ["STEPSCOPE_CACHE_DIR"] = str(path)
    yield path
    if before is None:
        del os.environ["STEPSCOPE_CACHE_DIR"]
    else:
        os.environ["STEPSCOPE_CACHE_DIR"] = before


@pytest.fixture(scope="module")
def server(logdir: Path, cache: Path) -> Iterator[McpServer]:
    s = McpServer(logdir, cache)
    yield s
    s.close()


def _trimmed(answer: Any, full: Any, path: str = "") -> None:
    """``answer`` is ``full`` with parts left out: every value there is in ``full`` at the
    same place (lists: a run of items from the start, or from the page's offset; strings: the
    same or shortened to a start and "…"; floats to 6 significant digits)."""
    if isinstance(full, dict):
        assert isinstance(answer, dict), path
        assert set(answer) <= set(full), (path, set(answer) - set(full))
        for k, v in answer.items():
            _trimmed(v, full[k], f"{path}.{k}")
    elif isinstance(full, list):
        assert isinstance(answer, list) and len(answer) <= len(full), path
        for a, f in zip(answer, full, strict=False):
            _trimmed(a, f, path + "[]")
    elif isinstance(full, str):
        assert answer == full or (answer.endswith("…") and full.startswith(answer[:-1])), \
            (path, answer, full)
    elif isinstance(full, float) and not isinstance(answer, bool):
        assert math.isclose(answer, full, rel_tol=1e-5, abs_tol=1e-9), (path, answer, full)
    else:
        assert answer == full, (path, answer, full)


def _content(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k not in META_KEYS}


def _paged(answer: dict[str, Any], full: dict[str, Any]) -> dict[str, Any]:
    """``full`` with its main table at the answer's page (so both start at the same row)."""
    page = answer.get("page")
    if not page or not page["offset"]:
        return full
    key, lo = page["table"], page["offset"]
    table = full[key]
    rows = table[lo:] if isinstance(table, list) else {k: v[lo:] for k, v in table.items()}
    return {**full, key: rows}


def test_every_declared_tool_is_listed_with_its_schema(server: McpServer) -> None:
    listed = {t.name: t for t in server.tools()}
    assert set(listed) == set(TOOLS) | OWN
    for name, spec in TOOLS.items():
        schema = listed[name].input_schema
        props = schema["properties"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert {"run", "host", "limit", "offset", "full_names"} <= set(props)
        for p in spec.params:
            kind = {"int": "integer", "flag": "boolean", "text": "string",
                    "run": "string"}[p.kind]
            assert props[p.name]["type"] == kind, (name, p.name)
            if p.kind == "int":
                assert (props[p.name]["minimum"], props[p.name]["maximum"]) == (p.low, p.high)
        assert listed[name].description.startswith(spec.summary)
        assert listed[name].annotations.read_only_hint is True
    assert listed["capture"].annotations.read_only_hint is False
    assert server.client is not None and "list_runs" in (server.client.instructions or "")


def test_list_runs_and_hosts(server: McpServer, logdir: Path) -> None:
    runs = server.answer("list_runs")
    names = [r["name"] for r in runs["runs"]]
    # the linked run outside the logdir is not one
    assert sorted(names) == sorted([*KINDS, "qwen_h100"])
    hosts = server.answer("list_hosts", {"run": "dlrm_8_ranks"})
    assert len(hosts["hosts"]) == 8 and hosts["failed"] == {}
    assert hosts["tools"] == stepscope.open(logdir / "plugins/profile/dlrm_8_ranks"
                                            ).available_tools()


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_tool_answers_on_every_kind_of_run(server: McpServer, logdir: Path,
                                                 kind: str) -> None:
    run = stepscope.open(logdir / "plugins" / "profile" / kind)
    offered = run.available_tools()
    other = next(k for k in KINDS if k != kind)
    for name in TOOLS:
        params = PARAMS.get(name, {})
        given = dict(params)
        if name == "diff":  # another run: by its name over MCP, by its path to the Run
            given = {"base": other}
            params = {"base": str(logdir / "plugins" / "profile" / other)}
        if name not in offered:  # listed only where it has something; else it says why
            try:
                run.tool(name, **params)
            except stepscope.StepscopeError:
                server.refusal(name, {"run": kind, **given})
                continue
        full = run.tool(name, **params).to_dict()
        answer = server.answer(name, {"run": kind, **given})
        assert not set(full) & set(META_KEYS), name  # the answer's own keys are free
        _trimmed(_content(answer), full, name)
        page = answer.get("page")
        if page is not None:  # the main table: the top rows, all of them unless omitted
            total = len(full[page["table"]]) if isinstance(full[page["table"]], list) \
                else len(next(iter(full[page["table"]].values()), []))
            assert page["total"] == total and page["offset"] == 0
            assert page["rows"] == total or answer["omitted"][page["table"]] == \
                total - page["rows"]
            assert page["rows"] >= min(total, 5), (name, page)
        if "omitted" not in answer:  # nothing left out: the answer is the tool's JSON
            assert json.dumps(_content(answer), sort_keys=True) == \
                json.dumps(json.loads(json.dumps(_content(answer))), sort_keys=True)
            _trimmed(full, _content(answer), name)  # both ways: the same JSON
        whole = server.answer(name, {"run": kind, "full_names": True, **given})
        _trimmed(_content(whole), full, name)
        assert "names_shortened" not in whole.get("omitted", {})
    if len(run.hosts) > 1:  # one host of several
        host = run.hosts[-1]
        full = run.tool("framework_op_stats", host).to_dict()
        _trimmed(_content(server.answer("framework_op_stats", {"run": kind, "host": host})),
                 full)


def test_answers_equal_the_command_line_json(server: McpServer, logdir: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = logdir / "plugins/profile/torch_h100"
    for name in ("advice", "steps", "pod_viewer"):
        capsys.readouterr()
        assert main(["tool", name, str(path), "--json"]) == 0
        cli = json.loads(capsys.readouterr().out)
        answer = server.answer(name, {"run": "torch_h100"})
        assert "omitted" not in answer
        _trimmed(_content(answer), cli, name)
        _trimmed(cli, _content(answer), name)


def test_long_tables_come_in_pages(server: McpServer, logdir: Path) -> None:
    full = stepscope.open(logdir / "plugins/profile/tf_v100").tool(
        "framework_op_stats").to_dict()["ops"]
    first = server.answer("framework_op_stats", {"run": "tf_v100", "limit": 5})
    assert first["page"] == {"table": "ops", "offset": 0, "rows": 5, "total": len(full),
                             "next_offset": 5}
    assert first["omitted"]["ops"] == len(full) - 5
    second = server.answer("framework_op_stats", {"run": "tf_v100", "limit": 5,
                                                  "offset": first["page"]["next_offset"]})
    assert second["page"]["offset"] == 5 and second["page"]["rows"] == 5
    _trimmed(second["ops"], full[5:10])
    assert [r["name"] for r in second["ops"]] != [r["name"] for r in first["ops"]]
    last = server.answer("framework_op_stats", {"run": "tf_v100", "offset": len(full) - 2})
    assert last["page"]["rows"] == 2 and last["page"]["next_offset"] is None
    # A large limit still fits the bound: the answer says how many rows it could give.
    big = server.answer("framework_op_stats", {"run": "tf_v100", "limit": 1000})
    assert 5 <= big["page"]["rows"] < 1000
    # trace search: its column table is paged the same way
    search = server.answer("trace_search", {"run": "tf_v100", "q": "Conv", "limit": 3})
    assert search["page"]["rows"] == 3 and all(len(c) == 3 for c in search["matches"].values())


@pytest.mark.parametrize(("tool", "args", "says"), [
    ("framework_op_stats", {"limit": -1}, "limit"),
    ("framework_op_stats", {"limit": "many"}, "limit"),
    ("framework_op_stats", {"limit": 10**30}, "limit"),
    ("framework_op_stats", {"limit": 2.5}, "limit"),
    ("framework_op_stats", {"offset": -3}, "offset"),
    ("framework_op_stats", {"include_idle": "perhaps"}, "include_idle"),
    ("framework_op_stats", {"colour": "red"}, "colour"),
    ("framework_op_stats", {"run": ["tf_v100"]}, "run"),
    ("framework_op_stats", {"run": {"name": "x"}}, "run"),
    ("framework_op_stats", {"host": "no-such-host", "run": "tf_v100"}, "no-such-host"),
    ("framework_op_stats", {"host": "../../etc/passwd"}, "logdir"),
    ("trace_search", {"q": "x" * 5000}, "q"),
    ("trace_search", {"q": "a\x00b"}, "q"),
    ("trace_window", {"width": 0}, "width"),
    ("trace_window", {"start_ns": 10**30}, "start_ns"),
    ("memory_profile", {"run": "jax_mi300", "allocator": "no-such-allocator"}, "allocator"),
    ("graph_viewer", {"run": "jax_mi300", "op": "no-such-op"}, "no-such-op"),
    ("memory_viewer", {"run": "jax_mi300", "module": "no-such-module"}, "no-such-module"),
    ("op_profile", {"run": "torch_h100"}, "XLA"),
    ("no_such_tool", {}, "no_such_tool"),
    ("list_hosts", {"run": "nope"}, "nope"),
])
def test_hostile_parameters_get_one_line(server: McpServer, tool: str, args: dict[str, Any],
                                         says: str) -> None:
    assert says in server.refusal(tool, args)


@pytest.mark.parametrize("name", [
    "../outside/secret_run", "/etc", "~/x", "..", "%2e%2e/outside", "%252e%252e/x",
    "plugins/profile/../../../outside", "C:\\Windows", "linked", "outside/secret_run",
])
def test_a_run_outside_the_logdir_is_refused(server: McpServer, name: str) -> None:
    text = server.refusal("overview_page", {"run": name})
    assert "secret" not in text.replace(name, "")  # nothing of what lies outside is told


def test_capture_is_refused_without_the_flag(server: McpServer, logdir: Path) -> None:
    before = sorted(p.name for p in (logdir / "plugins/profile").iterdir())
    text = server.refusal("capture", {"service_addr": "grpc://127.0.0.1:1",
                                      "duration_ms": 100})
    assert "--allow-capture" in text
    assert sorted(p.name for p in (logdir / "plugins/profile").iterdir()) == before


def test_capture_with_the_flag_records_a_new_run(tmp_path: Path, cache: Path) -> None:
    import stepscope.server

    port = stepscope.server.start(0)  # a real profiler server in this process
    s = McpServer(tmp_path / "logs", cache, "--allow-capture")
    try:
        assert "no runs" in s.refusal("overview_page")
        assert "Service address" in s.refusal("capture", {"service_addr": "not an address!"})
        done = s.answer("capture", {"service_addr": f"grpc://127.0.0.1:{port}",
                                    "duration_ms": 300})
        assert done["ok"] is True and done["workers"][0]["ok"] is True
        assert [r["name"] for r in s.answer("list_runs")["runs"]] == [done["run"]]
        assert s.answer("overview_page", {"run": done["run"]})["run"] == done["run"].rsplit(
            "/", 1)[-1]
    finally:
        s.close()
        stepscope.server.stop()


def test_the_worked_questions_of_the_docs_are_answered_so(server: McpServer) -> None:
    """Every call in docs/agents.md's worked questions answers, and every figure its answer
    quotes ("key":number) is in the server's answer."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "agents.md").read_text()
    worked = text[text.index("## Three worked questions"):]
    calls = 0
    call: tuple[str, dict[str, Any]] | None = None
    quoted = ""

    def check() -> None:
        if call is None:
            return
        answer = server.answer(*call)
        compact = json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
        for pair in re.findall(r'"\w+":-?\d[\d.]*', quoted):
            assert pair in compact, (call, pair)

    for line in worked.splitlines():
        match = re.fullmatch(r"([a-z_]+) (\{.*\})", line.strip())
        if match:
            check()
            call, quoted, calls = (match[1], json.loads(match[2])), "", calls + 1
        elif line.startswith("```") and call is not None and quoted:
            check()
            call = None
        elif call is not None:
            quoted += line
    check()
    assert calls >= 10


@pytest.mark.parametrize("data", [
    {f"k{i}": i for i in range(20_000)},  # thousands of top-level figures
    {"rows": [{"name": "x" * 1_000_000}]},  # one row of a megabyte
    {"rows": [{"a": [[[[list(range(1000))]]]] * 50}] * 100, "pie": list(range(10**5))},
    {"rows": {"id": list(range(10**5)), "name": ["n" * 300] * 10**5}},  # a column table
    {"nested": {str(i): {str(j): "v" * 200 for j in range(100)} for i in range(100)}},
])
@pytest.mark.parametrize("full_names", [False, True])
def test_any_answer_fits_the_bound(data: dict[str, Any], full_names: bool) -> None:
    from stepscope.mcp.answers import Sizing, fit, size_of

    answer = fit(data, "rows", Sizing(limit=1000, full_names=full_names))
    assert size_of(answer) <= BUDGET_BYTES
    assert answer.get("omitted")  # and it says what it left out
    _trimmed(_content(answer), data)
