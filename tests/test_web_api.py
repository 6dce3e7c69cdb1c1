"""The web UI's HTTP API: runs, hosts, tools, data and CSV, and every 4xx it promises."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from stepscope.analysis import op_stats, overview
from stepscope.analysis.run_model.framework_op_stats import ops_csv
from stepscope.formats.run_reader import load
from stepscope.web.app import create_app
from waiting import attempts, final_api, until

from workloads import EVIL_OP, make_stepscope_run


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A logdir with two runs: one host, and two hosts."""
    root = tmp_path_factory.mktemp("web_api")
    one = make_stepscope_run(root)
    two = one.parent / "two_hosts"
    two.mkdir()
    shutil.copy(next(one.glob("*.xplane.pb")), two / "worker_a.xplane.pb")
    other = make_stepscope_run(tmp_path_factory.mktemp("other"), steps=6, host="worker_b")
    shutil.copy(other / "worker_b.xplane.pb", two / "worker_b.xplane.pb")
    return root


@pytest.fixture(scope="module")
def client(logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    os.environ["STEPSCOPE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    with TestClient(create_app(logdir), base_url="http://127.0.0.1") as c:
        yield c
    del os.environ["STEPSCOPE_CACHE_DIR"]


def _runs(client: TestClient) -> dict[str, list[str]]:
    body = client.get("/api/runs").json()
    return {r["name"]: r["hosts"] for r in body["runs"]}


def _data(client: TestClient, **params: str) -> dict[str, Any]:
    """GET /api/data, asking again while the server answers 202 (still loading) or the
    trace viewer answers from its coarse overview (its index still building)."""
    def ask() -> dict[str, Any] | None:
        reply = client.get("/api/data", params=params)
        body: dict[str, Any] = reply.json()
        if reply.status_code == 202:
            assert body["status"] in ("loading", "indexing")
            return None
        assert reply.status_code == 200, reply.text
        return None if body.get("coarse") else body

    return until(ask, f"tool data {params}")


def _single_run(client: TestClient) -> str:
    return next(name for name, hosts in _runs(client).items() if hosts == ["vm"])


def test_runs_newest_first_with_hosts(client: TestClient, logdir: Path) -> None:
    body = client.get("/api/runs").json()
    assert body["logdir"] == str(logdir)
    names = [r["name"] for r in body["runs"]]
    assert names == sorted(names, reverse=True)
    runs = _runs(client)
    assert runs["two_hosts"] == ["worker_a", "worker_b"]
    assert client.get("/api/hosts", params={"run": "two_hosts"}).json()["hosts"] == [
        "worker_a", "worker_b"]


def test_tools_list_overview_and_op_stats(client: TestClient) -> None:
    tools = client.get("/api/tools", params={"run": _single_run(client)}).json()["tools"]
    names = [t["name"] for t in tools]
    assert names[:2] == ["overview_page", "framework_op_stats"]
    ops = next(t for t in tools if t["name"] == "framework_op_stats")
    assert ops["csv"] is True and ops["flags"] == ["include_idle"]


def test_overview_equals_the_analysis(client: TestClient, logdir: Path) -> None:
    run = _single_run(client)
    got = _data(client, run=run, tool="overview_page")
    want = overview(load(logdir / "plugins" / "profile" / run, use_cache=False)).to_dict()
    # stepscope's own capture: all 8 steps were recorded whole and are kept (issue 30).
    assert got["steps"]["count"] == want["steps"]["count"] == 8
    assert got["steps"]["avg_ms"] == pytest.approx(want["steps"]["avg_ms"])
    assert got["breakdown"] == pytest.approx(want["breakdown"])
    per_step = got["steps"]["per_step"][0]
    assert sum(per_step["breakdown_ms"].values()) == pytest.approx(per_step["ms"])
    assert [o["name"] for o in got["top_ops"]] == [o["name"] for o in want["top_ops"]]


def test_host_choice(client: TestClient) -> None:
    both = _data(client, run="two_hosts", tool="overview_page")
    one = _data(client, run="two_hosts", tool="overview_page", host="worker_b")
    assert both["environment"]["hosts"] == 2
    assert one["host"] == "worker_b" and one["environment"]["host_names"] == ["worker_b"]
    assert one["steps"]["count"] == 6  # worker_b profiled 6 steps, all whole
    ops_all = _data(client, run="two_hosts", tool="framework_op_stats")
    ops_b = _data(client, run="two_hosts", tool="framework_op_stats", host="worker_b")
    occ = {r["name"]: r["occurrences"] for r in ops_all["ops"]}
    occ_b = {r["name"]: r["occurrences"] for r in ops_b["ops"]}
    assert occ["matmul"] == 8 + 6 and occ_b["matmul"] == 6


def test_op_stats_idle_and_csv(client: TestClient, logdir: Path) -> None:
    run = _single_run(client)
    plain = _data(client, run=run, tool="framework_op_stats")
    idle = _data(client, run=run, tool="framework_op_stats", include_idle="true")
    assert not any(r["type"] == "IDLE" for r in plain["ops"])
    assert any(r["type"] == "IDLE" for r in idle["ops"])
    profile = load(logdir / "plugins" / "profile" / run, use_cache=False)
    want = op_stats(profile)
    assert [r["name"] for r in plain["ops"]] == [r.name for r in want.rows]
    reply = client.get("/api/csv", params={"run": run, "tool": "framework_op_stats"})
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/csv")
    assert "attachment" in reply.headers["content-disposition"]
    assert reply.text == ops_csv(want)


def test_op_names_are_data(client: TestClient) -> None:
    """The API returns a hostile op name as a JSON string (the page shows it as text)."""
    ops = _data(client, run=_single_run(client), tool="framework_op_stats")["ops"]
    assert EVIL_OP in [r["name"] for r in ops]
    assert client.get("/api/runs").headers["content-type"] == "application/json"


@pytest.mark.parametrize("run", [
    "../", "..", "../../etc/passwd", "/etc/passwd", "a/../../b", "..\\..\\windows",
    "C:\\Windows", "%2e%2e%2f", "%2e%2e/%2e%2e", "%252e%252e%252fetc", "x\x00y", "~root",
])
def test_traversal_is_400(client: TestClient, run: str) -> None:
    for route in ("hosts", "tools", "status", "data", "csv"):
        reply = client.get(f"/api/{route}", params={"run": run, "tool": "overview_page"})
        assert reply.status_code == 400, (route, run, reply.text)
        assert "error" in reply.json()


def test_pod_viewer_route(client: TestClient) -> None:
    data = _data(client, run="two_hosts", tool="pod_viewer")
    assert data["hosts"] == ["worker_a", "worker_b"] and data["kind"] == "hosts"
    assert sum(data["stragglers"].values()) == sum(
        1 for s in data["steps"] if s["straggler"] is not None)
    csv_reply = client.get("/api/csv", params={"run": "two_hosts", "tool": "pod_viewer"})
    assert csv_reply.status_code == 200
    assert csv_reply.text.splitlines()[0].startswith("step_num,host,total_ms")
    for host, code in (("../x", 400), ("<img src=x>", 404), ("nope", 404)):
        reply = client.get("/api/data", params={"run": "two_hosts", "tool": "pod_viewer",
                                                "host": host})
        assert reply.status_code == code, (host, reply.text)
        assert "error" in reply.json()


def test_traversal_in_host_and_tool_is_400(client: TestClient) -> None:
    run = _single_run(client)
    for params in ({"host": "../vm"}, {"tool": "../../x"}, {"tool": "%2e%2e%2fx"}):
        reply = client.get("/api/data", params={"run": run, "tool": "overview_page", **params})
        assert reply.status_code == 400, (params, reply.text)


@pytest.mark.parametrize(("route", "params", "code"), [
    ("data", {"run": "no_such_run", "tool": "overview_page"}, 404),
    ("data", {"tool": "overview_page"}, 400),
    ("data", {"run": "RUN", "tool": "no_such_tool"}, 404),
    ("data", {"run": "RUN"}, 400),
    ("data", {"run": "RUN", "tool": "overview_page", "host": "no_such_host"}, 404),
    ("data", {"run": "RUN", "tool": "framework_op_stats", "include_idle": "maybe"}, 400),
    ("csv", {"run": "RUN", "tool": "overview_page"}, 404),  # the overview has no CSV
    ("hosts", {"run": "no_such_run"}, 404),
    ("tools", {"run": "RUN", "host": "nope"}, 404),
    ("nothing_here", {}, 404),
])
def test_client_errors(client: TestClient, route: str, params: dict[str, str],
                       code: int) -> None:
    run = _single_run(client)
    params = {k: (run if v == "RUN" else v) for k, v in params.items()}
    reply = client.get(f"/api/{route}", params=params)
    assert reply.status_code == code, reply.text
    assert isinstance(reply.json()["error"], str)


@pytest.mark.parametrize(("method", "route", "params", "body"), [
    ("GET", "runs", {}, b""),
    ("GET", "hosts", {"run": "RUN"}, b""),
    ("GET", "tools", {"run": "RUN", "host": "vm"}, b""),
    ("GET", "hosts", {"run": "no_such_run"}, b""),
    ("GET", "tools", {"run": "RUN", "host": "nope"}, b""),
    ("GET", "data", {"run": "RUN", "tool": "no_such_tool"}, b""),
    ("GET", "data", {"run": "%2e%2e%2fx", "tool": "overview_page"}, b""),
    ("GET", "csv", {"run": "RUN", "tool": "overview_page"}, b""),
    ("GET", "trace/nothing", {"run": "RUN"}, b""),
    ("GET", "trace/event", {"run": "RUN", "id": "99999999"}, b""),
    ("GET", "trace/event", {"run": "RUN", "id": "-1"}, b""),
    ("GET", "capture", {"id": "abcdef0123456789"}, b""),
    ("GET", "nothing_here", {}, b""),
    ("POST", "capture", {}, b"not json"),
    ("POST", "capture", {}, b'{"service_addr": ""}'),
])
def test_tensorboard_dispatch_answers_as_the_server(client: TestClient, method: str,
                                                    route: str, params: dict[str, str],
                                                    body: bytes) -> None:
    """One route table: TensorBoard's host (``routes.dispatch``) answers every request with the
    status and JSON body that the server's app does."""
    from stepscope.web.routes import ApiRequest, dispatch

    run = _single_run(client)
    params = {k: (run if v == "RUN" else v) for k, v in params.items()}
    if route.startswith("trace/"):
        _data(client, run=run, tool="trace_viewer")  # the index is built: no 202 below
    headers = {"content-type": "application/json"}
    served = client.request(method, f"/api/{route}", params=params, content=body or None,
                            headers=headers)
    reply = dispatch(client.app.api, method, route,  # type: ignore[attr-defined]
                     ApiRequest(query=params, body=body, content_type=headers["content-type"],
                                host="127.0.0.1"))
    assert reply.status == served.status_code >= 200, served.text
    assert json.loads(reply.body) == served.json()


def test_new_runs_appear_without_restart(client: TestClient, logdir: Path) -> None:
    before = set(_runs(client))
    extra = logdir / "plugins" / "profile" / "zz_late_run"
    extra.mkdir()
    shutil.copy(next((logdir / "plugins" / "profile" / "two_hosts").glob("*.pb")),
                extra / "late.xplane.pb")
    try:
        assert set(_runs(client)) == before | {"zz_late_run"}
        assert client.get("/api/runs").json()["runs"][0]["name"] == "zz_late_run"
    finally:
        shutil.rmtree(extra)


def test_headers_openapi_and_static(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "connect-src 'self'" in csp
    schema = client.get("/api/openapi.json").json()
    assert {"/api/runs", "/api/hosts", "/api/tools", "/api/data", "/api/csv",
            "/api/status", "/api/trace/{view}"} <= set(schema["paths"])
    assert set(schema["paths"]["/api/capture"]) == {"get", "post"}
    data = {p["name"]: p for p in schema["paths"]["/api/data"]["get"]["parameters"]}
    assert data["run"]["required"] and not data["host"]["required"]
    assert data["include_idle"]["schema"] == {"type": "boolean"}
    view = schema["paths"]["/api/trace/{view}"]["get"]["parameters"][0]
    assert view["in"] == "path" and view["required"]
    assert client.get("/docs").status_code == 404  # Swagger UI would load from a CDN
    assert client.get("/static/no-such-file.js").status_code == 404


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS"])
def test_other_methods_are_405_with_the_security_headers(client: TestClient,
                                                          method: str) -> None:
    for route in ("/api/runs", "/api/capture", "/api/no_such_route"):
        reply = client.request(method, route)
        assert reply.status_code == 405, (method, route, reply.text)
        assert isinstance(reply.json()["error"], str)
        assert "default-src 'self'" in reply.headers["content-security-policy"]
    assert client.post("/api/runs").status_code == 405


def test_a_failing_answer_is_a_500_in_one_json_line(client: TestClient,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A bug in an answer is logged with its traceback and answered in one JSON line with
    the security headers (never a traceback to the client); the server goes on."""
    from stepscope.web import app

    def broken(*args: Any) -> Any:
        raise RuntimeError("secret detail")

    monkeypatch.setattr(app, "dispatch", broken)
    reply = client.get("/api/runs")
    assert reply.status_code == 500 and "secret" not in reply.text
    assert isinstance(reply.json()["error"], str)
    assert "default-src 'self'" in reply.headers["content-security-policy"]
    assert "secret detail" in caplog.text  # the log has it
    monkeypatch.undo()
    assert client.get("/api/runs").status_code == 200


def test_head_answers_as_get_without_a_body(client: TestClient) -> None:
    reply = client.head("/api/runs")
    assert reply.status_code == 200 and reply.content == b""
    assert reply.headers["content-type"] == "application/json"
    assert "default-src 'self'" in reply.headers["content-security-policy"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(port: int, path: str, proc: subprocess.Popen[bytes]) -> None:
    for _ in attempts():
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read().decode() if proc.stderr else "exited")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("server did not come up")


def _spawn_serve(logdir: Path, cache: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A fresh `stepscope serve` on ``logdir`` (its cache in ``cache``), once it answers."""
    port = _free_port()
    env = {**os.environ, "STEPSCOPE_CACHE_DIR": str(cache)}
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", "serve", "--logdir",
                             str(logdir), "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_http(port, "/api/runs", proc)
    except BaseException:
        proc.kill()
        proc.wait(timeout=20)
        raise
    return proc, port


def test_serve_binds_loopback_and_refuses_raw_traversal(logdir: Path, tmp_path: Path) -> None:
    """`stepscope serve` itself: listens on 127.0.0.1 only; raw `..` paths get nothing."""
    proc, port = _spawn_serve(logdir, tmp_path)
    try:
        import psutil

        listening = [c.laddr for c in psutil.Process(proc.pid).net_connections("inet")
                     if c.status == psutil.CONN_LISTEN]
        assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening
        for raw in ("/static/../../pyproject.toml", "/static/..%2f..%2fpyproject.toml",
                    "/static/%2e%2e/%2e%2e/pyproject.toml", "/../../etc/passwd"):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.putrequest("GET", raw, skip_accept_encoding=True)  # sent as written
            conn.endheaders()
            reply = conn.getresponse()
            body = reply.read()
            assert reply.status in (400, 404), (raw, reply.status)
            assert b"[project]" not in body and b"root:" not in body
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/api/data?run=..%2F..%2Fetc&tool=overview_page")
        reply = conn.getresponse()
        assert reply.status == 400 and "error" in json.loads(reply.read())
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` as written on a new connection; everything the server sends back until
    it closes the connection (or 5 s pass)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except TimeoutError:
            pass
    return out


def test_serve_speaks_http_1_1(logdir: Path, tmp_path: Path) -> None:
    """`stepscope serve`'s own HTTP server: keep-alive, HEAD, the Host check, bodies sent in
    pieces and over the limit, and malformed requests answered in one line."""
    proc, port = _spawn_serve(logdir, tmp_path)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        runs = []
        for _ in range(3):  # one connection, kept alive
            conn.request("GET", "/api/runs")
            reply = conn.getresponse()
            assert reply.status == 200
            assert reply.getheader("X-Content-Type-Options") == "nosniff"
            assert "default-src 'self'" in (reply.getheader("Content-Security-Policy") or "")
            runs.append(json.loads(reply.read()))
        assert runs[0] == runs[1] == runs[2] and runs[0]["runs"]
        conn.request("HEAD", "/")
        reply = conn.getresponse()
        assert reply.status == 200 and int(reply.getheader("Content-Length") or 0) > 0
        assert reply.read() == b""
        conn.request("GET", "/api/runs", headers={"Host": "rebound.example"})
        reply = conn.getresponse()
        assert reply.status == 403 and "error" in json.loads(reply.read())
        # A body in chunks over the limit: 413 without reading it all.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/api/capture", body=iter([b"x" * 40_000] * 3),
                     headers={"Content-Type": "application/json"}, encode_chunked=True)
        reply = conn.getresponse()
        assert reply.status == 413 and "error" in json.loads(reply.read())
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/api/capture", body=iter([b'{"service_addr"', b": 5}"]),
                     headers={"Content-Type": "application/json"}, encode_chunked=True)
        reply = conn.getresponse()
        assert reply.status == 400 and "error" in json.loads(reply.read())
        for bad in (b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nX: " + b"a" * 100_000 + b"\r\n\r\n",
                    b"GET / HTTP/1.1\r\n\r\n"):  # (HTTP/1.1 without a Host header)
            out = _raw_exchange(port, bad)
            assert out.startswith(b"HTTP/1.1 4"), out[:80]
            assert out.count(b"HTTP/1.1") == 1 and b"Traceback" not in out
        assert proc.poll() is None  # still serving
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/api/runs")
        assert conn.getresponse().status == 200
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert b"Traceback" not in err, err.decode(errors="replace")


def test_serve_reads_http_1_1_framing_and_refuses_the_rest(logdir: Path, tmp_path: Path
                                                           ) -> None:
    """The server's own request parser: pipelined requests, bare LF line ends, bodies framed
    by Content-Length or by chunks (with extensions and trailers) are read; a request framed
    twice, an unknown transfer coding, HTTP/2, a folded header, two Host headers or two
    lengths are refused in one line; a malformed chunk ends the connection after its
    answer."""
    proc, port = _spawn_serve(logdir, tmp_path)
    host = b"Host: 127.0.0.1\r\n"
    close = b"Connection: close\r\n"
    post = b"POST /api/capture HTTP/1.1\r\n" + host + b"Content-Type: application/json\r\n"

    def statuses(data: bytes) -> list[bytes]:
        out = _raw_exchange(port, data)
        assert b"Traceback" not in out
        return [part.split(b"\r\n", 1)[0] for part in out.split(b"HTTP/1.1 ")[1:]]

    try:
        runs = b"GET /api/runs HTTP/1.1\r\n" + host
        assert statuses(runs + b"\r\n" + runs + close + b"\r\n") == [b"200 OK"] * 2
        assert statuses(b"\r\nGET /api/runs HTTP/1.1\nHost: 127.0.0.1\nConnection: close\n\n"
                        ) == [b"200 OK"]
        # A body the app does not read is drained: the next request on the line is answered.
        assert statuses(runs + b"Content-Length: 5\r\n\r\nhello" + runs + close + b"\r\n"
                        ) == [b"200 OK"] * 2
        bad_addr = b'{"service_addr": 5}'
        for framed in (b"Content-Length: 19\r\n" + close + b"\r\n" + bad_addr,
                       b"Transfer-Encoding: chunked\r\n" + close + b"\r\n5;x=1\r\n"
                       + bad_addr[:5] + b"\r\ne\r\n" + bad_addr[5:] + b"\r\n0\r\nX-T: 1\r\n\r\n"):
            out = _raw_exchange(port, post + framed)
            assert out.startswith(b"HTTP/1.1 400") and b"service_addr must name" in out, out
        refused = {
            b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc": b"400",
            b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd": b"400",
            b"Content-Length: -3\r\n\r\n": b"400",
            b"Transfer-Encoding: gzip\r\n\r\n": b"501",
            b"X: a\r\n b\r\n\r\n": b"400",
            host + b"\r\n": b"400",
        }
        for fields, status in refused.items():
            assert statuses(post + fields) == [status + b" " + _phrase(status)], fields
        assert statuses(b"GET / HTTP/2.0\r\n" + host + b"\r\n") == [
            b"505 HTTP Version Not Supported"]
        # A malformed chunk: answered (as an empty body), and the connection ends there.
        out = statuses(post + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"
                       + runs + b"\r\n")
        assert len(out) == 1 and out[0].startswith(b"4"), out
        assert proc.poll() is None
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert b"Traceback" not in err, err.decode(errors="replace")


def _phrase(status: bytes) -> bytes:
    return http.HTTPStatus(int(status)).phrase.encode()


def test_serve_port_in_use_is_one_line(logdir: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "stepscope", "serve", "--logdir",
                               str(logdir), "--port", str(port)], capture_output=True,
                              text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert f"Cannot listen on 127.0.0.1:{port}" in done.stderr


def test_tensorboard_shows_the_plugin(logdir: Path, tmp_path: Path) -> None:
    """Real TensorBoard finds our entry point and serves the same API under its prefix."""
    pytest.importorskip("tensorboard")
    port = _free_port()
    env = {**os.environ, "STEPSCOPE_CACHE_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
                             "--port", str(port), "--host", "127.0.0.1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_http(port, "/data/plugins_listing", proc)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/data/plugins_listing")
        listing = json.loads(conn.getresponse().read())
        assert listing["stepscope"]["enabled"] is True
        prefix = "/data/plugin/stepscope"
        assert listing["stepscope"]["loading_mechanism"] == {
            "type": "IFRAME", "module_path": prefix + "/index.js"}
        conn.request("GET", prefix + "/api/runs")
        reply = conn.getresponse()
        runs = json.loads(reply.read())["runs"]
        assert reply.status == 200 and "two_hosts" in [r["name"] for r in runs]
        conn.request("GET", prefix + "/api/hosts?run=..%2Fx")
        reply = conn.getresponse()
        assert reply.status == 400 and "error" in json.loads(reply.read())
        conn.request("GET", prefix + "/index.js")
        reply = conn.getresponse()
        assert reply.status == 200 and b"export function render" in reply.read()
        conn.request("GET", prefix + "/index.html")
        reply = conn.getresponse()
        assert reply.status == 200 and b"static/app.js" in reply.read()
        for _ in attempts():
            conn.request("GET", prefix + "/api/data?run=two_hosts&tool=overview_page")
            reply = conn.getresponse()
            body = json.loads(reply.read())
            if reply.status != 202:
                break
            time.sleep(0.05)
        assert reply.status == 200 and body["environment"]["hosts"] == 2
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_run_loads_once_and_again_when_its_files_change(logdir: Path, tmp_path: Path) -> None:
    from stepscope.model.logdir import list_runs
    from stepscope.web.api import Api

    run = tmp_path / "plugins" / "profile" / "copy"
    shutil.copytree(logdir / "plugins" / "profile" / "two_hosts", run)
    api = Api(tmp_path, use_cache=False)
    path = list_runs(tmp_path)["copy"]
    first = api.store.wait(path)
    assert first.state == "ready" and first.done == first.total > 0
    assert api.store.wait(path) is first  # answered from memory, not loaded again
    code, body = api.data("copy", None, "overview_page", {})
    assert code == 200 and api.store.wait(path) is first
    file = run / "worker_b.xplane.pb"
    stamp = file.stat().st_mtime_ns + 10**9
    os.utime(file, ns=(stamp, stamp))
    again = api.store.wait(path)
    assert again is not first and again.state == "ready"
    assert api.data("copy", None, "overview_page", {}) == (code, body)


@pytest.mark.parametrize(("headers", "body", "code"), [
    ({"content-type": "text/plain"}, '{"service_addr": "grpc://127.0.0.1:1"}', 415),
    ({"content-type": "application/json", "origin": "http://evil.example"},
     '{"service_addr": "grpc://127.0.0.1:1"}', 403),
    ({"content-type": "application/json", "origin": "null"},
     '{"service_addr": "grpc://127.0.0.1:1"}', 403),
    ({"content-type": "application/json"}, "not json", 400),
    ({"content-type": "application/json"}, "[1, 2]", 400),
    ({"content-type": "application/json"}, '{"service_addr": ""}', 400),
    ({"content-type": "application/json"}, '{"service_addr": "http://x:1"}', 400),
    ({"content-type": "application/json"},
     '{"service_addr": "grpc://127.0.0.1:1", "duration_ms": 36000000}', 400),
    ({"content-type": "application/json"},
     '{"service_addr": "grpc://127.0.0.1:1", "host_tracer_level": 9}', 400),
    ({"content-type": "application/json"},
     '{"service_addr": "grpc://127.0.0.1:1", "num_tracing_attempts": 0}', 400),
])
def test_capture_requests_refused(client: TestClient, headers: dict[str, str], body: str,
                                  code: int) -> None:
    reply = client.post("/api/capture", content=body, headers=headers)
    assert reply.status_code == code, reply.text
    assert isinstance(reply.json()["error"], str)


def test_capture_status_errors(client: TestClient) -> None:
    assert client.get("/api/capture", params={"id": "../x"}).status_code == 400
    assert client.get("/api/capture", params={"id": "abcdef0123456789"}).status_code == 404
    assert client.get("/api/capture").status_code == 400


def test_trace_index_is_built_in_the_background(logdir: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The index starts building once the run loads; until the per-track table is made the
    trace viewer answers from the coarse overview (its tool data and windows, marked
    ``coarse``), its other views are told the index is being built (202), and the run's other
    tools answer meanwhile; then every view answers exactly from the table, while the full
    index is still building, and from the index once built."""
    import threading

    from stepscope.analysis.trace import trace_index as ti
    from stepscope.model.logdir import list_runs
    from stepscope.run import storage
    from stepscope.web import trace
    from stepscope.web.api import Api

    gate, table_gate, calls, reports = threading.Event(), threading.Event(), [], []

    def slow_index(table: Any, source: Any, **kwargs: Any) -> ti.TraceIndex:
        reports.append(kwargs["progress"])
        assert gate.wait(60)
        return storage.index_for(table, source, **kwargs)

    real_table = trace.TrackTable

    def slow_table(*args: Any) -> Any:
        calls.append(threading.current_thread().name)
        assert table_gate.wait(60)
        return real_table(*args)

    monkeypatch.setattr(trace, "index_for", slow_index)
    monkeypatch.setattr(trace, "TrackTable", slow_table)
    monkeypatch.setattr(trace, "WAIT_S", 0.05)
    run = tmp_path / "plugins" / "profile" / "copy"
    shutil.copytree(logdir / "plugins" / "profile" / "two_hosts", run)
    api = Api(tmp_path, use_cache=False)
    state = api.store.wait(list_runs(tmp_path)["copy"])
    try:
        # No trace request yet: the store started the build itself.
        until(lambda: calls or None, "the store's own index build", 0.02)
        assert calls[0].startswith("stepscope-trace_index")
        # The table cannot be made (gated): the first 200 is the coarse overview, however
        # long the overview takes to come on a busy machine.
        code, coarse = until(lambda: (lambda a: a if a[0] == 200 else None)(
            api.data("copy", None, "trace_viewer", {})), "the coarse overview", 0.02)
        assert code == 200 and coarse["coarse"] and coarse["host"] == "worker_a"
        query = {"run": "copy", "start_ns": "0", "end_ns": str(coarse["span_ns"]),
                 "width": "10"}
        code, window = api.trace("window", query)
        assert code == 200 and window["coarse"]
        code, progress = api.trace("search", {"run": "copy", "q": "a"})
        assert code == 202 and progress["status"] == "indexing"
        assert progress["events"] == len(state.run.profile.hosts["worker_a"])  # first host
        assert api.data("copy", None, "overview_page", {})[0] == 200  # not held up
        table_gate.set()
        # The full index cannot finish (gated): every view answers exactly from the table.
        until(lambda: reports or None, "the full index's build", 0.02)
        code, exact = final_api(lambda: api.data("copy", None, "trace_viewer", {}),
                                "the table")
        assert code == 200 and "coarse" not in exact
        code, early = api.trace("window", query)
        assert code == 200 and "coarse" not in early and early["events"]["id"]
        assert api.trace("search", {"run": "copy", "q": "a"})[0] == 200
        reports[0](0.4)
    finally:
        table_gate.set()
        gate.set()
    code, body = final_api(lambda: api.data("copy", None, "trace_viewer", {}), "the index")
    assert code == 200 and body["host"] == "worker_a" and "coarse" not in body
    assert body == exact
    assert [t["id"] for t in body["tracks"]] == [t["id"] for t in coarse["tracks"]]
    assert final_api(lambda: api.trace("window", query), "the window")[1] == early
    assert len(calls) == 1  # built once


def test_capture_takes_a_tpu_name_validated_like_the_cli(client: TestClient) -> None:
    """The capture dialog's "TPU name" choice: a bad name is refused before any lookup."""
    bad = client.post("/api/capture", json={"service_addr": "Not_A_TPU", "is_tpu_name": True})
    assert bad.status_code == 400 and "not a Cloud TPU name" in bad.json()["error"]
    odd = client.post("/api/capture", json={"service_addr": "my-tpu", "is_tpu_name": "yes"})
    assert odd.status_code == 400 and "is_tpu_name" in odd.json()["error"]


def test_a_one_host_run_model_waits_for_the_trace_index(
        logdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server starts reading the newest run before anything asks (``RunStore.preload``); the trace
    viewer of a one-host run answers before its run model, which is built only once the
    index is built, not beside it (the two builds' memory would add up), however many exact
    windows go out meanwhile (here the index's build is held until the windows are out)."""
    import threading

    from stepscope.model.logdir import list_runs
    from stepscope.run import storage
    from stepscope.web import store, trace
    from stepscope.web.api import Api

    gate = threading.Event()
    index_done: list[bool] = []

    def held_index(table: Any, source: Any, **kwargs: Any) -> Any:
        assert gate.wait(60)
        index = storage.index_for(table, source, **kwargs)
        index_done.append(True)
        return index

    built_after: list[bool] = []
    build = store.build_run_model

    def recorded(profile: Any) -> Any:
        built_after.append(bool(index_done))
        return build(profile)

    monkeypatch.setattr(store, "MODEL_WAIT_S", None)
    monkeypatch.setattr(trace, "index_for", held_index)
    monkeypatch.setattr(store, "build_run_model", recorded)
    one = next(p for p in (logdir / "plugins" / "profile").iterdir() if p.name != "two_hosts")
    shutil.copytree(one, tmp_path / "plugins" / "profile" / "copy")
    api = Api(tmp_path, use_cache=False)
    api.store.preload(tmp_path)
    state = api.store.get(list_runs(tmp_path)["copy"])  # the one preload started
    code, meta = final_api(lambda: api.data("copy", None, "trace_viewer", {}), "tool data")
    assert code == 200 and "coarse" not in meta
    query = {"run": "copy", "start_ns": "0", "end_ns": str(meta["span_ns"]), "width": "100"}
    for _ in range(2):
        code, window = final_api(lambda: api.trace("window", query), "an exact window")
        assert code == 200 and window["events"]["id"]
    assert state.state == "loading" and not state.wanted.is_set() and not built_after
    gate.set()
    until(lambda: state.state == "ready" or None, "the run model")
    assert built_after == [True]
    assert api.data("copy", None, "overview_page", {})[0] == 200


def test_a_one_host_run_model_waits_until_the_trace_viewer_can_answer(
        logdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a busy machine the trace viewer's table may take longer than ``MODEL_WAIT_S``: the
    time limit counts from when the trace viewer can answer exactly, so the run model's build
    never runs beside the table's (here the table is slowed down and the limit is 0)."""
    from stepscope.model.logdir import list_runs
    from stepscope.web import store, trace
    from stepscope.web.api import Api

    slow_table = trace.TrackTable

    def slowed(*args: Any) -> Any:
        time.sleep(0.5)
        return slow_table(*args)

    built_after: list[bool] = []
    build = store.build_run_model

    def recorded(profile: Any) -> Any:
        built_after.append(state.early is not None and state.early.trace_ready.is_set())
        return build(profile)

    monkeypatch.setattr(store, "MODEL_WAIT_S", 0.0)
    monkeypatch.setattr(trace, "TrackTable", slowed)
    monkeypatch.setattr(store, "build_run_model", recorded)
    one = next(p for p in (logdir / "plugins" / "profile").iterdir() if p.name != "two_hosts")
    shutil.copytree(one, tmp_path / "plugins" / "profile" / "copy")
    api = Api(tmp_path, use_cache=False)
    state = api.store.get(list_runs(tmp_path)["copy"])
    until(lambda: state.state == "ready" or None, "the run model")
    assert built_after == [True]


def test_a_closed_store_writes_nothing_more(logdir: Path, tmp_path: Path, cache_home: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A store closed while its run's index builds (a server's shutdown, a test's end) saves
    nothing after ``close`` returns: the build ends and answers, but its index and the
    run's deferred saves are not written (in CI such a save landed in a later test's cache
    directory)."""
    import threading

    from stepscope.model.logdir import list_runs
    from stepscope.run import storage
    from stepscope.web import trace
    from stepscope.web.api import Api

    gate, building = threading.Event(), threading.Event()

    def slow_index(table: Any, source: Any, **kwargs: Any) -> Any:
        building.set()
        assert gate.wait(60)
        return storage.index_for(table, source, **kwargs)

    monkeypatch.setattr(trace, "index_for", slow_index)
    one = next(p for p in (logdir / "plugins" / "profile").iterdir() if p.name != "two_hosts")
    shutil.copytree(one, tmp_path / "plugins" / "profile" / "copy")
    api = Api(tmp_path, use_cache=True)
    state = api.store.get(list_runs(tmp_path)["copy"])
    until(lambda: building.is_set() or None, "the index build")
    future = (state.early or state.run).started(("trace_index", next(iter(
        (state.early or state.run).profile.sources))))
    assert future is not None
    before = sorted(p.name for p in cache_home.iterdir()) if cache_home.exists() else []
    api.store.close()
    gate.set()
    assert future.result(60) is not None  # the build still answers its waiters
    state.wanted.set()  # the run model is built too (and would save its table)
    until(lambda: state.state != "loading" or None, "the run model")
    after = sorted(p.name for p in cache_home.iterdir()) if cache_home.exists() else []
    assert after == before
    assert not any(n.startswith(".") or "tmp" in n for n in after)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice: Linux")
def test_background_threads_yield_the_cores_to_the_server_s_answers() -> None:
    """A background thread's priority is lowered (and the threads it starts inherit it, as
    the decoder's do); the server's own threads keep theirs; asking twice lowers it once."""
    import os
    import threading

    from stepscope.web.loaded_run import BACKGROUND_NICE, background_priority

    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen: dict[str, int] = {}

    def child() -> None:
        seen["child"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def background() -> None:
        background_priority()
        background_priority()
        seen["background"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        started = threading.Thread(target=child)
        started.start()
        started.join()

    thread = threading.Thread(target=background)
    thread.start()
    thread.join()
    want = min(base + BACKGROUND_NICE, 19)
    assert seen == {"background": want, "child": want}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base
