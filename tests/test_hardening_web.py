"""Issue 22's server, web and remote items: hostile Host headers (DNS rebinding), a run whose
only file is bad, the trace viewer's page errors when switching runs, a symlinked
plugins/profile folder and unchecked fields of a profiler request."""

from __future__ import annotations

import http.client
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import grpc
import pytest
from starlette.testclient import TestClient

import stepscope
from stepscope.capture import session
from stepscope.remote import protocol
from stepscope.remote.plan import plan_capture
from stepscope.web import store as store_module
from stepscope.web.api import Api
from stepscope.web.app import create_app
from stepscope.web.host_check import HostCheck, host_name_of
from waiting import attempts

from browser import Server, Watched, free_port, shot, watch
from conftest import FIXTURES
from workloads import make_stepscope_run

GPU_FIXTURE = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
LARGE_BAD_BYTES = 30_000_000


def _truncated_profile(size: int) -> bytes:
    """A real XSpace (the GPU fixture, repeated: repeated planes of one message concatenate)
    cut off after ``size`` bytes."""
    data = GPU_FIXTURE.read_bytes()
    return (data * (size // len(data) + 1))[:size]


# -- item 8: the Host header -----------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hosts")
    make_stepscope_run(root, steps=3).rename(root / "plugins" / "profile" / "only_run")
    return root


@pytest.fixture(scope="module")
def client(plain_logdir: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[TestClient]:
    os.environ["STEPSCOPE_CACHE_DIR"] = str(tmp_path_factory.mktemp("host_cache"))
    try:
        with TestClient(create_app(plain_logdir), base_url="http://127.0.0.1:6006") as c:
            yield c
    finally:
        os.environ.pop("STEPSCOPE_CACHE_DIR", None)


def _refused(reply: Any, status: int) -> str:
    """The one-line error of a refusal with ``status``."""
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert "\n" not in reply.text
    message: str = reply.json()["error"]
    return message


@pytest.mark.parametrize("host", ["evil.example:6006", "evil.example", "127.0.0.1.evil.example",
                                  "localhost.evil.example:6006", "10.0.0.1:6006",
                                  "[::2]:6006", "0.0.0.0:6006"])
def test_other_host_names_are_refused(client: TestClient, host: str) -> None:
    """A page whose name was rebound to 127.0.0.1 reads nothing and starts nothing."""
    for path in ("/api/runs", "/api/data?run=only_run&tool=overview_page", "/",
                 "/static/app.js"):
        message = _refused(client.get(path, headers={"host": host}), 403)
        assert "--allow-host" in message and host_name_of(host) in message
    capture = client.post("/api/capture", headers={"host": host,
                                                   "content-type": "application/json"},
                          content=json.dumps({"service_addr": "grpc://127.0.0.1:1"}))
    _refused(capture, 403)
    assert not client.app.api.captures._jobs  # type: ignore[attr-defined]


@pytest.mark.parametrize("host", ["a b", "evil.example:port", "[::1", "[evil]:6006", ":6006",
                                  "x" * 300, "evil_.example:99999999", "evil.example:6006:1"])
def test_malformed_host_headers_are_bad_requests(client: TestClient, host: str) -> None:
    message = _refused(client.get("/api/runs", headers={"host": host}), 400)
    assert "Host header" in message and len(message) < 300


@pytest.mark.parametrize("host", ["127.0.0.1:6006", "127.0.0.1", "localhost:6006",
                                  "LOCALHOST.:6006", "[::1]:6006", "[0:0::1]"])
def test_loopback_names_are_answered(client: TestClient, host: str) -> None:
    reply = client.get("/api/runs", headers={"host": host})
    assert reply.status_code == 200, reply.text
    assert [r["name"] for r in reply.json()["runs"]] == ["only_run"]


def test_allowed_names_the_listen_host_and_wildcards() -> None:
    check = HostCheck("192.168.7.9", ["profiles.example", "[fd00::5]", "box"])
    assert check.refusal("192.168.7.9:6006") is None
    assert check.refusal("Profiles.Example:80") is None
    assert check.refusal("[fd00:0::5]:6006") is None
    assert check.refusal("box") is None
    assert check.refusal("192.168.7.10:6006")[0] == 403  # type: ignore[index]
    assert check.refusal("other.example")[0] == 403  # type: ignore[index]
    assert check.refusal(None)[0] == 400  # type: ignore[index]
    assert check.refusal("")[0] == 400  # type: ignore[index]
    # Listening on every interface: any address of the machine (an address in Host cannot be
    # a rebound name), this machine's name, still no other name.
    every = HostCheck("0.0.0.0")
    assert every.refusal("10.1.2.3:6006") is None and every.refusal("[fe80::1]:1") is None
    assert every.refusal("evil.example:6006")[0] == 403  # type: ignore[index]
    assert HostCheck("::").refusal("evil.example")[0] == 403  # type: ignore[index]
    assert HostCheck("127.0.0.1", ["*"]).refusal("anything.example") is None


def _raw(port: int, method: str, path: str, host: str, body: bytes = b"",
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.putrequest(method, path, skip_host=True)
    conn.putheader("Host", host)
    for key, value in (headers or {}).items():
        conn.putheader(key, value)
    conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    reply = conn.getresponse()
    return reply.status, reply.read()


def test_serve_allow_host_option(plain_logdir: Path, tmp_path: Path) -> None:
    """`stepscope serve --allow-host NAME` answers NAME besides the loopback names, and
    refuses the rest, reads and captures alike, with one JSON line."""
    port = free_port()
    env = {**os.environ, "STEPSCOPE_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", "serve", "--logdir",
                             str(plain_logdir), "--port", str(port), "--allow-host",
                             "box.example", "--allow-host", "other.example"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for _ in attempts():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                status, _ = _raw(port, "GET", "/api/runs", f"127.0.0.1:{port}")
                break
            except OSError:
                time.sleep(0.1)
        assert status == 200
        for host in (f"box.example:{port}", "other.example", f"localhost:{port}"):
            assert _raw(port, "GET", "/api/runs", host)[0] == 200, host
        status, body = _raw(port, "GET", "/api/runs", f"evil.example:{port}")
        assert status == 403 and body.count(b"\n") == 0
        assert "evil.example" in json.loads(body)["error"]
        status, body = _raw(port, "POST", "/api/capture", f"evil.example:{port}",
                            b'{"service_addr": "grpc://127.0.0.1:1"}',
                            {"Content-Type": "application/json"})
        assert status == 403, body
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    bad = subprocess.run([sys.executable, "-m", "stepscope", "serve", "--logdir",
                          str(plain_logdir), "--port", str(port), "--allow-host", "a b/c"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "stepscope: error: --allow-host 'a b/c' is not a host name or address."]


@pytest.mark.parametrize(("body", "status"), [
    (b"[" * 50_000, 400),  # nesting deeper than the JSON parser's recursion
    (b'{"service_addr": "' + b"a" * 200_000 + b'"}', 413),
    (json.dumps({"service_addr": "grpc://[::1\u0000]:1"}).encode(), 400),
    (json.dumps({"service_addr": "grpc://a b:1"}).encode(), 400),
    (json.dumps({"service_addr": "grpc://[not-an-address]:1"}).encode(), 400),
    (json.dumps({"service_addr": "grpc://host:\u00b2"}).encode(), 400),
    (json.dumps({"service_addr": "grpc://" + "h" * 300 + ":1"}).encode(), 400),
])
def test_hostile_capture_bodies_are_refused(client: TestClient, body: bytes,
                                            status: int) -> None:
    reply = client.post("/api/capture", content=body,
                        headers={"content-type": "application/json"})
    message = _refused(reply, status)
    assert len(message) < 300
    assert not client.app.api.captures._jobs  # type: ignore[attr-defined]


# -- item 10: a run whose only file is bad ----------------------------------------------------


@pytest.mark.parametrize("size", [1000, LARGE_BAD_BYTES], ids=["small", "large"])
def test_a_bad_only_file_fails_once_and_is_remembered(
        tmp_path: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, size: int) -> None:
    """The first poll starts reading; every later one answers the same 422 (never 202 again)
    without reading the file again, until the file changes; the server's log says it once."""
    caplog.set_level(logging.WARNING, logger="stepscope.web")
    run = tmp_path / "logs" / "plugins" / "profile" / "bad_run"
    run.mkdir(parents=True)
    bad = run / "worker.xplane.pb"
    bad.write_bytes(_truncated_profile(size))
    reads: list[Any] = []
    real_open = store_module.open_run_model
    real_build = store_module.build_run_model

    def counted_open(path: Path, **kwargs: Any) -> Any:
        reads.append(path)
        return real_open(path, **kwargs)

    def counted_build(profile: Any) -> Any:  # a one-host run: its table read first
        reads.append(profile)
        return real_build(profile)

    monkeypatch.setattr(store_module, "open_run_model", counted_open)
    monkeypatch.setattr(store_module, "build_run_model", counted_build)
    with TestClient(create_app(tmp_path / "logs"), base_url="http://127.0.0.1") as client:
        def poll() -> Any:
            return client.get("/api/data", params={"run": "bad_run", "tool": "overview_page"})

        answers = [poll()]
        while answers[-1].status_code == 202 and len(answers) < 600:
            time.sleep(0.05)
            answers.append(poll())
        error = _refused(answers[-1], 422)
        assert "worker.xplane.pb" in error and "truncated" in error
        later = [poll() for _ in range(15)]
        assert [r.status_code for r in later] == [422] * 15
        assert {r.json()["error"] for r in later} == {error}
        status = client.get("/api/status", params={"run": "bad_run"}).json()
        assert status["status"] == "failed" and status["error"] == error
        assert len(reads) == 1
        logged = [r.getMessage() for r in caplog.records if r.name == "stepscope.web"]
        assert logged == [f"stepscope serve: {error}"]
        # Fixed: the file changes, the next request reads it again.
        bad.write_bytes(GPU_FIXTURE.read_bytes())
        for _ in attempts():
            reply = poll()
            if reply.status_code != 202:
                break
            time.sleep(0.05)
        assert reply.status_code == 200, reply.text
        assert len(reads) == 2


def test_a_file_restored_with_its_old_times_is_read_again(tmp_path: Path,
                                                          cache_home: Path) -> None:
    """Remembering a failure must not outlive its cause: a good copy put back with the bad
    file's size and modification time (``cp -p``, ``rsync -a``) still counts as a change."""
    run = tmp_path / "plugins" / "profile" / "restored"
    run.mkdir(parents=True)
    good = GPU_FIXTURE.read_bytes()
    file = run / "worker.xplane.pb"
    file.write_bytes(good[: len(good) // 2] + bytes(len(good) - len(good) // 2))
    stamp = file.stat().st_mtime_ns
    api = Api(tmp_path)
    assert api.store.wait(run).state == "failed"
    assert api.store.wait(run).state == "failed"  # remembered, not read again
    file.write_bytes(good)
    os.utime(file, ns=(stamp, stamp))
    assert api.store.wait(run).state == "ready"


# -- item 12 and 13: the profiler server's request checks ------------------------------------


def _tf_request(root: str, session_id: str = "run1", host: str = "worker") -> Any:
    """A request as TensorFlow's client sends it: the worker writes the profile itself."""
    request = protocol.ProfileRequest(duration_ms=3000, repository_root=root,
                                      session_id=session_id, host_name=host,
                                      emit_xspace=False)
    request.opts.version = 1
    request.opts.host_tracer_level = 2
    request.opts.duration_ms = 3000
    return request


def _profile(port: int, request: Any) -> Any:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(protocol.PROFILE_METHOD,
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=protocol.ProfileResponse.FromString)
        try:
            return call(request, timeout=60)
        except grpc.RpcError as err:
            return err


@pytest.fixture
def profiler_server() -> Iterator[int]:
    port = stepscope.server.start(0)
    yield port
    stepscope.server.stop()


def _refused_request(port: int, request: Any, *phrases: str) -> str:
    """The details of the INVALID_ARGUMENT the server answers, checked before recording."""
    err = _profile(port, request)
    assert isinstance(err, grpc.RpcError), err
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    details: str = err.details()
    for phrase in phrases:
        assert phrase in details
    assert len(details) < 400 and "\n" not in details
    assert not session.is_running()
    return details


def test_a_symlink_named_plugins_profile_is_refused(profiler_server: int,
                                                    tmp_path: Path) -> None:
    """The check follows the file system: a link spelled <logdir>/plugins/profile that leads
    elsewhere is refused, and nothing is written where it leads."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "logs" / "plugins" / "profile"
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere)
    details = _refused_request(profiler_server, _tf_request(str(link)), "leads outside")
    assert str(elsewhere) not in details
    # A link to another logdir's plugins/profile is a plugins/profile folder: written there.
    real = tmp_path / "real" / "plugins" / "profile"
    real.mkdir(parents=True)
    other = tmp_path / "other" / "plugins" / "profile"
    other.parent.mkdir(parents=True)
    other.symlink_to(real)
    plan = plan_capture(_tf_request(str(other)), 0)
    assert plan.out_path == real / "run1" / "worker.xplane.pb"
    # The run folder may not lead elsewhere either.
    (real / "run2").symlink_to(elsewhere)
    _refused_request(profiler_server, _tf_request(str(real), "run2"), "is a link")
    assert list(elsewhere.iterdir()) == []


def test_a_run_folder_swapped_for_a_link_during_the_capture_is_refused(
        profiler_server: int, tmp_path: Path) -> None:
    """Checked again when writing: a link put in place while the capture records."""
    root = tmp_path / "plugins" / "profile"
    root.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    request = _tf_request(str(root), "swapped")
    request.opts.duration_ms = request.duration_ms = 1500

    def swap() -> None:
        time.sleep(0.5)
        (root / "swapped").symlink_to(elsewhere)

    import threading

    threading.Thread(target=swap).start()
    err = _profile(profiler_server, request)
    assert isinstance(err, grpc.RpcError) and err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "is a link" in err.details()
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize(("fields", "phrases"), [
    ({"root": "/tmp/logs\0/plugins/profile"}, ("repository_root", "control characters")),
    ({"root": "/tmp/lo\ngs/plugins/profile"}, ("repository_root", "control characters")),
    ({"root": "/tmp/" + "d/" * 2100 + "plugins/profile"}, ("longer than 4096 bytes",)),
    ({"session_id": "r" * 10_000}, ("session_id", "10,000 characters", "longer than 255")),
    ({"session_id": "a\0b"}, ("session_id", "control characters")),
    ({"session_id": "x/" * 5000}, ("session_id", "longer than")),
    ({"host": "h" * 10_000}, ("host_name", "10,000 characters")),
    ({"host": "worker\0"}, ("host_name", "control characters")),
])
def test_unchecked_request_fields_are_refused_before_recording(
        profiler_server: int, fields: dict[str, str], phrases: tuple[str, ...]) -> None:
    """Refused with one short INVALID_ARGUMENT before anything is recorded, whether the
    worker writes the profile (TensorFlow's clients) or sends it back (stepscope's)."""
    args = (fields.get("session_id", "run1"), fields.get("host", "worker"))
    request = _tf_request(fields.get("root", "/tmp/stepscope-test/plugins/profile"), *args)
    _refused_request(profiler_server, request, *phrases)
    request.emit_xspace = True
    _refused_request(profiler_server, request, *phrases)


def test_an_overlong_folder_name_in_the_root_is_refused(profiler_server: int) -> None:
    request = _tf_request("/tmp/" + "d" * 300 + "/plugins/profile")
    _refused_request(profiler_server, request, "folder name longer than 255 bytes")


# -- item 9 (and 10 in the page): the browser ------------------------------------------------


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("switching")
    runs = root / "plugins" / "profile"
    make_stepscope_run(root, steps=4).rename(runs / "a_stepscope")
    two = make_stepscope_run(tmp_path_factory.mktemp("two"), steps=3, host="worker_b")
    two.rename(runs / "b_stepscope")
    (runs / "c_gpu").mkdir()
    (runs / "c_gpu" / GPU_FIXTURE.name).symlink_to(GPU_FIXTURE)
    (runs / "d_bad").mkdir()
    (runs / "d_bad" / "worker.xplane.pb").write_bytes(_truncated_profile(LARGE_BAD_BYTES))
    return root


def _trace_ready(w: Watched) -> None:
    w.page.wait_for_selector("#trace-page")
    w.page.wait_for_function("() => window.stepscopeTrace && window.stepscopeTrace.ready()")


def _choose(w: Watched, select: str, value: str) -> None:
    w.page.select_option(select, value)
    w.page.wait_for_function(f"() => location.hash.includes('{select[1:]}={value}')")


def test_switching_runs_and_tools_raises_no_page_error(watched: Watched,
                                                       server: Server) -> None:
    """Trace viewer on one run, then another run, other tools, another host and back: the
    page raises no error at any point (the harness fails the test on any)."""
    for run in ("a_stepscope", "b_stepscope", "c_gpu"):
        server.data(run=run, tool="trace_viewer")  # loaded and indexed
    page = watched.page
    page.goto(server.base + "#" + urlencode({"run": "a_stepscope", "tool": "trace_viewer"}))
    _trace_ready(watched)
    for run in ("b_stepscope", "c_gpu", "a_stepscope"):
        _choose(watched, "#run", run)
        _trace_ready(watched)
        page.wait_for_timeout(300)  # resize observers and redraws of the page left behind
    for tool, selector in (("overview_page", "#overview-page"), ("framework_op_stats", "#ops-page"),
                           ("trace_viewer", "#trace-page"), ("input_pipeline_analyzer",
                                                             "#input-page"),
                           ("kernel_stats", "#kernels-page"), ("pod_viewer", "#pod-summary"),
                           ("trace_viewer", "#trace-page")):
        _choose(watched, "#tool", tool)
        page.wait_for_selector(selector)
        page.wait_for_timeout(200)
    _trace_ready(watched)
    _choose(watched, "#run", "c_gpu")
    _trace_ready(watched)
    page.set_viewport_size({"width": 900, "height": 600})  # the observer fires on a live page
    page.wait_for_timeout(300)
    shot(watched, "hardening-switched", settle_ms=0)
    assert int(page.get_attribute("#trace-canvas", "data-drawn") or 0) > 0
    assert not watched.errors


def test_a_bad_run_shows_its_error_not_loading(watched: Watched, server: Server) -> None:
    """The page names the bad file at once instead of "Loading …" for ever."""
    watched.expect_console_error(r"status of 422")
    page = watched.page
    page.goto(server.base + "#" + urlencode({"run": "d_bad", "tool": "overview_page"}))
    alert = page.wait_for_selector("#page .error[role=alert]", timeout=60_000)
    assert alert is not None
    text = alert.text_content() or ""
    assert "worker.xplane.pb" in text and "truncated" in text
    page.wait_for_timeout(1000)  # and it stays
    assert page.query_selector("#loading") is None
    assert "worker.xplane.pb" in (page.text_content("#page") or "")
    shot(watched, "hardening-bad-run", settle_ms=0)


def test_the_harness_fails_a_test_on_any_page_error(browser: Any, server: Server) -> None:
    """Every browser test fails on an uncaught error or a console error of its page, unless
    the test said it expects that console error."""
    for script, error in (("setTimeout(() => { throw new Error('thrown late'); }, 0)",
                           "Error: thrown late"),
                          ("console.error('logged')", "console error: logged")):
        with pytest.raises(AssertionError, match=error), watch(browser, server) as w:
            w.page.goto(server.base + "#run=a_stepscope&tool=overview_page")
            w.page.evaluate(script)
            w.page.wait_for_timeout(200)
    with watch(browser, server) as w:
        w.expect_console_error("expected")
        w.page.goto(server.base + "#run=a_stepscope&tool=overview_page")
        w.page.evaluate("console.error('expected'); console.warn('only a warning')")
        w.page.wait_for_timeout(200)


# == issue 29 =================================================================================
# -- 29.7 a file:// repository root is its local folder, never ./file:/… ----------------------


def test_a_file_url_repository_root_is_written_to_its_folder(
        profiler_server: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    root = tmp_path / "logs" / "plugins" / "profile"
    plan = plan_capture(_tf_request(f"file://{root}"), 0)
    assert plan.out_path == root / "run1" / "worker.xplane.pb"
    request = _tf_request(f"file://{root}", "urlrun")
    request.opts.duration_ms = request.duration_ms = 300
    reply = _profile(profiler_server, request)
    assert not isinstance(reply, grpc.RpcError), reply
    assert (root / "urlrun" / "worker.xplane.pb").is_file()
    for bad in (f"simplecache::file://{root}", f"x:/y://{root}"):
        _refused_request(profiler_server, _tf_request(bad), "neither a local path" if "x:/" in
                         bad else "chained URL")
    assert not any(work.iterdir())


# -- 29.19 captures asked for over HTTP do not reach link-local or metadata targets ----------


@pytest.mark.parametrize("addr", [
    "grpc://169.254.169.254:80", "169.254.10.1:6009", "metadata.google.internal:80",
    "grpc://METADATA.google.internal.:80", "metadata:80", "grpc://[fe80::1]:6009",
    "grpc://[::ffff:169.254.169.254]:80", "100.100.100.200:80", "[fd00:ec2::254]:80",
    "127.0.0.1:6009,169.254.169.254:80",
])
def test_capture_targets_that_are_link_local_or_metadata_are_refused(client: TestClient,
                                                                     addr: str) -> None:
    reply = client.post("/api/capture", json={"service_addr": addr, "duration_ms": 100})
    message = _refused(reply, 400)
    assert "--allow-link-local-capture" in message
    assert "link-local" in message or "metadata" in message
    assert not client.app.api.captures._jobs  # type: ignore[attr-defined]


def test_the_serve_flag_allows_link_local_capture_targets(plain_logdir: Path,
                                                          capsys: Any) -> None:
    from stepscope.cli import build_parser
    from stepscope.remote.addresses import parse
    from stepscope.web.capture_targets import check_targets

    check_targets(parse("169.254.169.254:80,[fe80::1]:1"), allow_link_local=True)
    app = create_app(plain_logdir, allow_link_local_capture=True)
    assert app.api.captures._allow_link_local  # type: ignore[attr-defined]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    assert "--allow-link-local-capture" in capsys.readouterr().out
