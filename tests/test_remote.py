"""On-demand capture over TensorFlow's profiler protocol, with real processes on 127.0.0.1.

Workers are separate Python processes running ``stepscope.server.start`` (or TensorFlow's
server) and a small training loop; the client side is ``stepscope.client.trace``, the
``capture`` command, TensorFlow's ``client.trace`` or XProf's capture.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest

import stepscope
from stepscope.capture import session
from stepscope.errors import (
    CaptureError,
    InvalidOptionError,
    ProfilerAlreadyRunningError,
    ProfilerNotRunningError,
    ProfilerServerError,
    StepscopeError,
)
from stepscope.formats.xplane_builder import read_space
from stepscope.model import schema
from stepscope.remote import addresses, protocol
from stepscope.remote import cli as remote_cli
from stepscope.remote.client import WorkerProgress

from xspace_view import plane, plane_stats

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# A training process with a stepscope profiler server: argv is port, host, token ("" leaves
# the argument out). It logs to stdout, so a test can see "ready <port>" and "remote capture
# started".
WORKER = """
import logging, sys, time
import stepscope
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s %(message)s")
port, host, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]
bound = stepscope.server.start(port, **({"host": host} if host else {}),
                               **({"token": token} if token else {}))
print("ready", bound, flush=True)
step = 0
while True:
    with stepscope.Trace("train", step_num=step, _r=1):
        sum(i * i for i in range(2000))
    step += 1
    time.sleep(0.001)
"""

# A TensorFlow training process with TensorFlow's own profiler server on port argv[1].
TF_WORKER = """
import sys, time
import tensorflow as tf
tf.profiler.experimental.server.start(int(sys.argv[1]))
x = tf.random.normal((64, 64))
step = 0
while True:
    with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
        x = tf.linalg.matmul(x, x)
        x = x / tf.reduce_max(tf.abs(x))
    if step == 0:
        print("ready", flush=True)
    step += 1
    time.sleep(0.005)
"""

# Generous bounds on waits for things that must happen; never asserted as durations.
_STARTUP_S = 120


@dataclass
class Proc:
    """A spawned worker: its process, port, and the stdout lines read so far."""

    popen: subprocess.Popen[str]
    port: int
    lines: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    @property
    def name(self) -> str:
        return f"127.0.0.1_{self.port}"

    def wait_for(self, text: str) -> str:
        """Read stdout until a line containing ``text`` (fails if the process exits first)."""
        assert self.popen.stdout is not None
        while True:
            line = self.popen.stdout.readline()
            if not line:
                self.popen.wait()
                pytest.fail(f"worker exited ({self.popen.returncode}) before {text!r}: "
                            f"{''.join(self.lines)}")
            self.lines.append(line)
            if text in line:
                return line


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def spawn() -> Iterator[Callable[..., Proc]]:
    """Start worker processes; every one is killed at the end of the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(port: int = 0, host: str = "", token: str = "", tf: bool = False) -> Proc:
        args = [TF_WORKER, str(port)] if tf else [WORKER, str(port), host, token]
        popen = subprocess.Popen([sys.executable, "-c", *args], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
        procs.append(popen)
        proc = Proc(popen, port)
        line = proc.wait_for("ready")
        if not tf:
            proc.port = int(line.split()[1])
        return proc

    yield start
    for p in procs:
        p.kill()
        p.wait(timeout=_STARTUP_S)
        if p.stdout is not None:
            p.stdout.close()


@pytest.fixture
def local_server() -> Iterator[int]:
    """A profiler server in this process (for refusals that need no training loop)."""
    port = stepscope.server.start(0)
    yield port
    stepscope.server.stop()


def _names(path: Path) -> Counter[str]:
    """Event names of one profile file, counted, as stepscope.load reads them."""
    profile = stepscope.load(str(path), use_cache=False)
    (table,) = profile.hosts.values()
    return Counter(table.names[i] for i in table.name)


def _raw_profile(port: int, request: Any, metadata: Any = None, timeout: float = 60) -> Any:
    """Send one ProfileRequest; the response, or the grpc.RpcError it raised."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(protocol.PROFILE_METHOD,
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=protocol.ProfileResponse.FromString)
        try:
            return call(request, timeout=timeout, metadata=metadata)
        except grpc.RpcError as err:
            return err


def _request(duration_ms: int, **fields: Any) -> Any:
    request = protocol.ProfileRequest(duration_ms=duration_ms, emit_xspace=True, **fields)
    request.opts.version = 1
    request.opts.host_tracer_level = 2
    request.opts.duration_ms = duration_ms
    return request


def _no_temp_files(run_dir: Path) -> None:
    leftovers = [p.name for p in run_dir.iterdir() if p.name.startswith(".")]
    assert not leftovers, f"half-written files left in {run_dir}: {leftovers}"


# --- compatibility with TensorFlow and XProf ------------------------------------------------


def test_tensorflow_client_captures_a_stepscope_worker(spawn: Callable[..., Proc],
                                                       tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    worker = spawn()
    # TensorFlow's client asks the server to write the file itself; it names it after the
    # address it was given.
    tf.profiler.experimental.client.trace(f"grpc://localhost:{worker.port}", str(tmp_path), 800,
                                          num_tracing_attempts=1)
    (path,) = (tmp_path / "plugins" / "profile").glob("*/*.xplane.pb")
    assert path.name == f"localhost_{worker.port}.xplane.pb"
    names = _names(path)
    assert names["train"] > 0
    space = read_space(path)
    env = plane_stats(plane(space, schema.TASK_ENV_PLANE))
    # The default options TensorFlow's client sends: host tracer 2, Python tracer off.
    assert env[schema.ENV_OPTION_PREFIX + "host_tracer_level"] == 2
    assert env[schema.ENV_OPTION_PREFIX + "python_tracer_level"] == 0


def test_xprof_capture_targets_a_stepscope_worker(spawn: Callable[..., Proc],
                                                  tmp_path: Path) -> None:
    """TensorBoard's/XProf's "Capture Profile" button calls this same function."""
    pytest.importorskip("xprof")
    from xprof.convert import _pywrap_profiler_plugin

    worker = spawn()
    _pywrap_profiler_plugin.trace(f"127.0.0.1:{worker.port}", str(tmp_path), "", True, 600, 1,
                                  {"python_tracer_level": 1})
    (path,) = (tmp_path / "plugins" / "profile").glob("*/*.xplane.pb")
    assert path.name == f"{worker.name}.xplane.pb"
    space = read_space(path)
    env = plane_stats(plane(space, schema.TASK_ENV_PLANE))
    assert env[schema.ENV_OPTION_PREFIX + "python_tracer_level"] == 1
    assert any(p.name == schema.PYTHON_TRACER_PLANE for p in space.planes)
    assert _names(path)["train"] > 0


def test_stepscope_client_captures_a_tensorflow_worker(spawn: Callable[..., Proc],
                                                       tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    worker = spawn(port=_free_port(), tf=True)
    result = stepscope.client.trace(worker.address, tmp_path, 800)
    assert result.ok
    (done,) = result.workers
    assert done.path == result.run_dir / f"{worker.name}.xplane.pb"
    assert result.run_dir.parent == tmp_path / "plugins" / "profile"
    names = _names(done.path)
    assert names["train"] > 0
    assert any("MatMul" in name for name in names), sorted(names)[:40]
    assert done.events == sum(names.values())
    _no_temp_files(result.run_dir)


# --- many workers -----------------------------------------------------------------------------


def test_three_workers_one_killed_mid_capture(spawn: Callable[..., Proc],
                                             tmp_path: Path) -> None:
    workers = [spawn() for _ in range(3)]
    victim = workers[1]
    results: list[Any] = []
    capture = threading.Thread(target=lambda: results.append(stepscope.client.trace(
        ",".join(w.address for w in workers), tmp_path, 2000, num_tracing_attempts=2)))
    capture.start()
    victim.wait_for("remote capture started")
    victim.popen.kill()
    capture.join()

    (result,) = results
    by_name = {w.worker: w for w in result.workers}
    assert list(by_name) == [w.name for w in workers]
    failed = by_name[victim.name]
    assert not failed.ok and failed.path is None
    assert failed.error is not None and "lost the connection" in failed.error
    assert [w.worker for w in result.failed] == [victim.name]

    windows = []
    for w in (workers[0], workers[2]):
        ok = by_name[w.name]
        assert ok.ok and ok.path == result.run_dir / f"{w.name}.xplane.pb"
        assert _names(ok.path)["train"] > 0
        env = plane_stats(plane(read_space(ok.path), schema.TASK_ENV_PLANE))
        windows.append((env[schema.ENV_PROFILE_START_TIME], env[schema.ENV_PROFILE_STOP_TIME]))
    (a_start, a_stop), (b_start, b_stop) = windows
    assert a_start < b_stop and b_start < a_stop  # the two captures overlap in time
    assert sorted(p.name for p in result.run_dir.iterdir()) == sorted(
        f"{w.name}.xplane.pb" for w in (workers[0], workers[2]))


def test_retry_reaches_a_worker_that_starts_late(spawn: Callable[..., Proc],
                                                 tmp_path: Path) -> None:
    port = _free_port()
    first_failure = threading.Event()
    seen: list[WorkerProgress] = []

    def progress(update: WorkerProgress) -> None:
        seen.append(update)
        if update.state == "retrying":
            first_failure.set()

    results: list[Any] = []
    capture = threading.Thread(target=lambda: results.append(stepscope.client.trace(
        f"127.0.0.1:{port}", tmp_path, 500, num_tracing_attempts=10, progress=progress)))
    capture.start()
    assert first_failure.wait(_STARTUP_S)
    spawn(port=port)
    capture.join()
    (result,) = results
    (worker,) = result.workers
    assert worker.ok and worker.attempts > 1
    assert _names(worker.path)["train"] > 0
    assert [u.state for u in seen][:2] == ["capturing", "retrying"]
    assert seen[0].detail == "" and seen[1].detail == "unreachable"
    assert seen[-1].state == "done"


def test_all_workers_down_raises_and_leaves_nothing(tmp_path: Path) -> None:
    ports = [_free_port(), _free_port()]
    with pytest.raises(CaptureError, match="No worker gave a profile") as caught:
        stepscope.client.trace([f"127.0.0.1:{p}" for p in ports], tmp_path, 200,
                               num_tracing_attempts=2)
    result = caught.value.result
    assert [w.error for w in result.workers] == ["unreachable after 2 tries"] * 2
    assert not result.run_dir.exists()


# --- refusals -----------------------------------------------------------------------------------


def test_token_is_required_when_set(spawn: Callable[..., Proc], tmp_path: Path) -> None:
    worker = spawn(token="s3cret")
    with pytest.raises(CaptureError) as caught:
        stepscope.client.trace(worker.address, tmp_path, 200)
    (refused,) = caught.value.result.workers
    assert refused.attempts == 1  # a refusal is not worth retrying
    assert "requires a token" in refused.error

    with pytest.raises(CaptureError, match="does not match"):
        stepscope.client.trace(worker.address, tmp_path, 200, token="wrong")

    err = _raw_profile(worker.port, _request(200))
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED

    result = stepscope.client.trace(worker.address, tmp_path, 300, token="s3cret")
    assert result.ok and _names(result.workers[0].path)["train"] > 0


def test_second_capture_while_one_runs_is_busy(spawn: Callable[..., Proc]) -> None:
    worker = spawn()
    answers: list[Any] = []
    first = threading.Thread(target=lambda: answers.append(
        _raw_profile(worker.port, _request(1500))))
    first.start()
    worker.wait_for("remote capture started")
    busy = _raw_profile(worker.port, _request(200))
    first.join()
    assert isinstance(busy, grpc.RpcError)
    assert busy.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "busy" in busy.details()
    (response,) = answers
    assert not isinstance(response, grpc.RpcError), response
    assert not response.empty_trace and len(response.xspace) > 0


@pytest.mark.parametrize(("fields", "message"), [
    ({"duration_ms": 10 * 3600 * 1000}, "over this server's limit"),
    ({"duration_ms": 0}, "duration_ms is 0"),
    ({"duration_ms": 100, "max_events": 10**12}, "max_events"),
    ({"duration_ms": 100, "session_id": "../../etc"}, "not a plain folder name"),
])
def test_unreasonable_requests_are_refused(local_server: int, fields: dict[str, Any],
                                           message: str) -> None:
    duration = fields.pop("duration_ms")
    err = _raw_profile(local_server, _request(duration, **fields))
    assert isinstance(err, grpc.RpcError)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in err.details()
    assert not session.is_running()


def test_out_of_range_tracer_level_is_refused(local_server: int) -> None:
    request = _request(100)
    request.opts.host_tracer_level = 7
    err = _raw_profile(local_server, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "host_tracer_level=7" in err.details()


def test_client_refuses_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="up to an hour"):
        stepscope.client.trace("127.0.0.1:1", tmp_path, 10 * 3600 * 1000)
    with pytest.raises(InvalidOptionError, match="num_tracing_attempts"):
        stepscope.client.trace("127.0.0.1:1", tmp_path, 100, num_tracing_attempts=0)
    with pytest.raises(InvalidOptionError, match="listed twice"):
        stepscope.client.trace("127.0.0.1:1,grpc://127.0.0.1:1", tmp_path, 100)
    with pytest.raises(InvalidOptionError, match="not host:port"):
        stepscope.client.trace("grpc://127.0.0.1:0", tmp_path, 100)  # no port: 6009
    with pytest.raises(InvalidOptionError, match="unknown scheme"):
        stepscope.client.trace("http://127.0.0.1:80", tmp_path, 100)


def test_capture_is_refused_while_the_process_profiles_itself(local_server: int,
                                                              tmp_path: Path) -> None:
    stepscope.start(tmp_path / "local")
    try:
        with pytest.raises(CaptureError, match="already profiling itself"):
            stepscope.client.trace(f"127.0.0.1:{local_server}", tmp_path / "remote", 100)
    finally:
        stepscope.stop(save=False)


def test_local_start_and_stop_are_refused_during_a_remote_capture(local_server: int,
                                                                   tmp_path: Path) -> None:
    started = threading.Event()
    results: list[Any] = []

    def capture() -> None:
        results.append(stepscope.client.trace(
            f"127.0.0.1:{local_server}", tmp_path, 1500,
            progress=lambda u: started.set() if u.state == "capturing" else None))

    thread = threading.Thread(target=capture)
    thread.start()
    assert started.wait(_STARTUP_S)
    # The server starts its session once the request arrives; wait until it has.
    while not session.is_running() and thread.is_alive():
        thread.join(0.01)
    assert session.is_running()
    with pytest.raises(ProfilerAlreadyRunningError, match="remote capture"):
        stepscope.start(tmp_path / "local")
    with pytest.raises(ProfilerNotRunningError, match="remote capture"):
        stepscope.stop()
    thread.join()
    assert results[0].ok


def test_terminate_ends_a_capture_early_and_monitor_is_unimplemented(
        local_server: int) -> None:
    answers: list[Any] = []
    request = _request(600_000, session_id="long-one")
    # If Terminate did not end it, this call would run into its 60 s deadline and fail.
    first = threading.Thread(target=lambda: answers.append(_raw_profile(local_server, request)))
    first.start()
    while not session.is_running() and first.is_alive():
        first.join(0.01)
    with grpc.insecure_channel(f"127.0.0.1:{local_server}") as channel:
        terminate = channel.unary_unary(protocol.TERMINATE_METHOD,
                                        request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=protocol.TerminateResponse.FromString)
        terminate(protocol.TerminateRequest(session_id="long-one"), timeout=10)
        monitor = channel.unary_unary(protocol.MONITOR_METHOD,
                                      request_serializer=lambda m: m.SerializeToString(),
                                      response_deserializer=protocol.MonitorResponse.FromString)
        with pytest.raises(grpc.RpcError) as caught:
            monitor(protocol.MonitorRequest(duration_ms=100), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "does not serve Monitor" in caught.value.details()
    first.join()
    (response,) = answers
    assert not isinstance(response, grpc.RpcError), response
    assert len(response.xspace) > 0


# --- the listening socket -----------------------------------------------------------------------


def _listening_ips(pid: int, port: int) -> list[Any]:
    """The addresses ``pid`` listens on at ``port`` (IPv4-mapped IPv6 ones as IPv4)."""
    conns = psutil.Process(pid).net_connections(kind="inet")
    ips = [ipaddress.ip_address(c.laddr.ip) for c in conns
           if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    return [getattr(ip, "ipv4_mapped", None) or ip for ip in ips]


def test_default_bind_is_loopback_and_all_interfaces_is_opt_in(
        spawn: Callable[..., Proc]) -> None:
    default = spawn()
    ips = _listening_ips(default.popen.pid, default.port)
    assert ips and all(ip == ipaddress.ip_address("127.0.0.1") for ip in ips), ips
    assert not any("WARNING" in line for line in default.lines)

    everywhere = spawn(host="0.0.0.0")
    ips = _listening_ips(everywhere.popen.pid, everywhere.port)
    assert ips and all(ip.is_unspecified for ip in ips), ips
    warning = [line for line in everywhere.lines if line.startswith("WARNING")]
    assert warning and "anyone who can reach this port" in warning[0]


def test_stop_releases_the_port_and_one_server_per_process() -> None:
    port = stepscope.server.start(0)
    try:
        with pytest.raises(ProfilerServerError, match="already running"):
            stepscope.server.start(0)
        assert stepscope.server.running_address() == f"127.0.0.1:{port}"
    finally:
        stepscope.server.stop()
    assert stepscope.server.running_address() is None
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
        # While someone else holds the port, our server says so in one sentence.
        with pytest.raises(ProfilerServerError, match="port is in use"):
            stepscope.server.start(port)
    assert stepscope.server.start(port) == port
    stepscope.server.stop()


# --- the capture command ------------------------------------------------------------------------


def _capture_cli(argv: list[str]) -> int:
    """Run ``stepscope capture``: through ``stepscope.cli.main`` once it registers the command."""
    from stepscope import cli

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if "capture" in commands.choices:
        return cli.main(argv)
    parser = argparse.ArgumentParser(prog="stepscope")
    remote_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except StepscopeError as err:  # as cli.main reports it
        print(f"stepscope: error: {err}", file=sys.stderr)
        return 2


def test_capture_command_reports_each_worker(spawn: Callable[..., Proc], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    worker = spawn()
    down = _free_port()
    code = _capture_cli(["capture", f"{worker.address},grpc://127.0.0.1:{down}",
                         "--logdir", str(tmp_path), "--duration-ms", "500", "--retries", "2",
                         "--python-tracer-level", "1"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "capturing 2 workers for 0.5 s" in err
    ok_line = next(line for line in out.splitlines() if worker.name in line)
    events = int(ok_line.split("✓")[1].split()[0].replace(",", ""))
    (path,) = (tmp_path / "plugins" / "profile").glob(f"*/{worker.name}.xplane.pb")
    assert events == sum(_names(path).values())
    assert f"127.0.0.1_{down} ✗ unreachable after 2 tries" in out
    env = plane_stats(plane(read_space(path), schema.TASK_ENV_PLANE))
    assert env[schema.ENV_OPTION_PREFIX + "python_tracer_level"] == 1

    code = _capture_cli(["capture", f"grpc://127.0.0.1:{down}", "--logdir", str(tmp_path),
                         "--retries", "1", "--duration-ms", "100"])
    out, err = capsys.readouterr()
    assert code == 2
    assert f"127.0.0.1_{down} ✗ unreachable" in out
    assert "stepscope: error: No worker gave a profile" in err
    assert "Traceback" not in err

    code = _capture_cli(["capture", worker.address, "--logdir", str(tmp_path),
                         "--duration-ms", str(10 * 3600 * 1000)])
    out, err = capsys.readouterr()
    assert code == 2 and "up to an hour" in err and "capturing" not in err


# --- addresses ----------------------------------------------------------------------------------


def test_addresses_parse_as_tensorflow_writes_them() -> None:
    workers = addresses.parse("grpc://10.0.0.1:6009, worker-2:6010,grpc://[::1]:6011")
    assert [(w.host, w.port) for w in workers] == [("10.0.0.1", 6009), ("worker-2", 6010),
                                                   ("::1", 6011)]
    assert [w.target for w in workers] == ["10.0.0.1:6009", "worker-2:6010", "[::1]:6011"]
    assert [w.file_name for w in workers][:2] == ["10.0.0.1_6009.xplane.pb",
                                                  "worker-2_6010.xplane.pb"]
    for bad in ("", "grpc://", "host:0", "host:99999", "host:port", "[::1", "-host", "a..b",
                "has space", "host/path", "x" * 300, "host:", "grpc://:6009", "ho$t"):
        with pytest.raises(InvalidOptionError):
            addresses.parse(bad)


def test_a_bare_host_means_the_default_port() -> None:
    """Changed on purpose (issue 21): a host without a port was refused; it now means 6009,
    the port TensorFlow's guides start the profiler server on, as TensorBoard's dialog does."""
    assert addresses.DEFAULT_PORT == 6009
    workers = addresses.parse("localhost, myhost ,10.0.0.7,grpc://worker-3,[::1]")
    assert [(w.host, w.port) for w in workers] == [
        ("localhost", 6009), ("myhost", 6009), ("10.0.0.7", 6009), ("worker-3", 6009),
        ("::1", 6009)]
    assert [w.name for w in workers][:2] == ["localhost_6009", "myhost_6009"]
    with pytest.raises(InvalidOptionError, match="listed twice"):
        addresses.parse("localhost,localhost:6009")


def test_capture_cli_names_a_bare_host_with_the_default_port(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _capture_cli(["capture", "localhost", "--logdir", str(tmp_path), "--duration-ms",
                         "10", "--retries", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    # Whatever listens there (nothing, here), the worker asked was localhost:6009.
    assert [w["worker"] for w in out["workers"]] == ["localhost_6009"]
    assert code in (0, 1, 2)  # 2: no worker gave a profile


@pytest.mark.parametrize("bad", ["My_TPU", "tpu name", "-tpu", "1tpu", "t" * 64,
                                 "grpc://10.0.0.1:8470", "../etc"])
def test_tpu_names_are_validated_before_anything_is_asked(bad: str) -> None:
    with pytest.raises(InvalidOptionError, match="not a Cloud TPU name"):
        addresses.resolve_tpu(bad)


def test_an_unresolvable_tpu_name_is_one_clear_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TensorFlow's real TPU cluster resolver, here without the Cloud TPU API to reach."""
    code = _capture_cli(["capture", "my-tpu", "--tpu", "--logdir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "Could not resolve the TPU name 'my-tpu'" in err
    assert "Cloud TPU API" in err and "host:port" in err
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_tpu_name_without_tensorflow_says_what_to_install(tmp_path: Path) -> None:
    """In a process where TensorFlow cannot be imported (blocked at the import boundary)."""
    script = (
        "import sys\n"
        "sys.modules['tensorflow'] = None  # import tensorflow now raises ImportError\n"
        "from stepscope.cli import main\n"
        f"sys.exit(main(['capture', 'my-tpu', '--tpu', '--logdir', {str(tmp_path)!r}]))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "pip install tensorflow" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("root", ["/etc", "/tmp/x/plugins/profile/../../../etc",
                                  "relative/dir", "/tmp/logs/plugins"])
def test_writes_only_into_a_plugins_profile_folder(root: str) -> None:
    """A TF-style request names where the worker writes: only <logdir>/plugins/profile."""
    from stepscope.remote.plan import BadRequest, plan_capture

    request = protocol.ProfileRequest(duration_ms=100, repository_root=root,
                                      session_id="run", emit_xspace=False)
    with pytest.raises(BadRequest, match="plugins/profile"):
        plan_capture(request, 0)
    ok = protocol.ProfileRequest(duration_ms=100, repository_root="/tmp/logs/plugins/profile",
                                 session_id="run", emit_xspace=False)
    plan = plan_capture(ok, 0)
    assert plan.out_path is not None
    assert plan.out_path.parent == Path("/tmp/logs/plugins/profile/run")
