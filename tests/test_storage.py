"""Logdirs on object storage: profiles captured straight into ``s3://`` (a real S3-compatible
server, moto's, on 127.0.0.1), then reported and served from there; a filesystem whose
package is missing is one clear error before anything is recorded, and nothing is written
locally in its place."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stepscope
from stepscope.cli import main
from stepscope.errors import StorageError
from stepscope.model import cache, locations
from stepscope.model.logdir import list_runs, resolve

pytestmark = pytest.mark.usefixtures("cache_home")

BUCKET = "profiles"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """An S3-compatible server on 127.0.0.1 with one bucket; fsspec's s3 set up to use it."""
    import fsspec
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    settings = {"endpoint_url": endpoint, "key": "testing", "secret": "testing",
                "client_kwargs": {"region_name": "us-east-1"}}
    saved = fsspec.config.conf.get("s3")
    fsspec.config.conf["s3"] = settings
    env = {"FSSPEC_S3_ENDPOINT_URL": endpoint, "FSSPEC_S3_KEY": "testing",
           "FSSPEC_S3_SECRET": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    old_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import boto3

    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                 aws_secret_access_key="testing", region_name="us-east-1"
                 ).create_bucket(Bucket=BUCKET)
    try:
        yield endpoint
    finally:
        server.stop()
        if saved is None:
            fsspec.config.conf.pop("s3", None)
        else:
            fsspec.config.conf["s3"] = saved
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _s3() -> Any:
    import fsspec

    fs = fsspec.filesystem("s3")
    fs.invalidate_cache()
    return fs


def _record(logdir: str, steps: int = 5) -> Any:
    stepscope.start(logdir, options=stepscope.ProfilerOptions(counter_interval_ms=0))
    for step in range(steps):
        with stepscope.Trace("train", step_num=step, _r=1), stepscope.Trace("matmul"):
            sum(i * i for i in range(3000))
    return stepscope.stop()


def test_a_profile_captured_into_s3_is_reported_from_there(s3_endpoint: str, tmp_path: Path,
                                                           capsys: Any,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.chdir(tmp_path)
    logdir = f"s3://{BUCKET}/job1/logs"
    path = _record(logdir)
    assert str(path).startswith(f"s3://{BUCKET}/job1/logs/plugins/profile/")
    assert str(path).endswith(".xplane.pb")
    objects = _s3().find(f"{BUCKET}/job1")
    assert len(objects) == 1 and objects[0].endswith(".xplane.pb")
    # Nothing local: no "s3:" folder (the test's cache directory may be here).
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("s3")]

    code = main(["report", logdir, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["steps"]["count"] == 5
    assert any(op["name"] == "matmul" for op in summary["top_ops"])
    # The cache stays local, keyed by the object's identity: a second report hits it.
    # Entries of the object's key only: a background save left by an earlier test may land
    # in this cache directory on a busy machine.
    key = cache.source_key([path])

    def entries_of_the_object() -> list[str]:
        return sorted(p.name for p in cache.cache_dir().iterdir() if p.name.startswith(key))

    entries = entries_of_the_object()
    assert any(n.endswith(".table.cache") for n in entries)
    code = main(["ops", logdir, "--json"])
    assert code == 0
    capsys.readouterr()
    assert entries_of_the_object() == entries


def test_a_changed_object_is_read_again(s3_endpoint: str, capsys: Any) -> None:
    logdir = f"s3://{BUCKET}/job2/logs"
    path = _record(logdir, steps=3)
    run = str(path).rsplit("/", 1)[0]
    assert main(["report", run, "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["steps"]["count"] == 3
    local = Path(os.environ["STEPSCOPE_CACHE_DIR"]).parent / "other.xplane.pb"
    other = _record(str(local.parent / "other-logs"), steps=7)
    assert main(["report", str(other), "--json"]) == 0
    want = json.loads(capsys.readouterr()[0])["steps"]["count"]
    assert want != 3
    _s3().put_file(str(other), str(path).removeprefix("s3://"))  # same name, new content
    assert main(["report", run, "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["steps"]["count"] == want


def test_runs_in_s3_are_listed_and_served(s3_endpoint: str) -> None:
    from starlette.testclient import TestClient

    from stepscope.web.app import create_app

    logdir = f"s3://{BUCKET}/job3/logs"
    first = _record(logdir, steps=2)
    time.sleep(1.1)  # run folders are named to the second
    second = _record(logdir, steps=4)
    runs = list_runs(logdir)
    assert len(runs) == 2
    assert resolve(logdir)[1].name == str(second).split("/")[-2]
    assert str(first).split("/")[-2] in runs
    with TestClient(create_app(logdir), base_url="http://127.0.0.1") as client:
        listed = client.get("/api/runs").json()["runs"]
        assert sorted(r["name"] for r in listed) == sorted(runs)
        newest = str(second).split("/")[-2]
        for _ in range(600):
            reply = client.get("/api/data", params={"run": newest, "tool": "overview_page"})
            if reply.status_code != 202:
                break
            time.sleep(0.05)
        assert reply.status_code == 200, reply.text
        assert reply.json()["steps"]["count"] == 4


WORKER = """
import sys, time
import stepscope
bound = stepscope.server.start(0)
print("ready", bound, flush=True)
step = 0
while True:
    with stepscope.Trace("train", step_num=step, _r=1):
        sum(i * i for i in range(2000))
    step += 1
    time.sleep(0.001)
"""


def test_capture_client_writes_into_s3(s3_endpoint: str, tmp_path: Path, capsys: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    worker = subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        assert line.startswith("ready"), line
        port = int(line.split()[1])
        logdir = f"s3://{BUCKET}/job4/logs"
        code = main(["capture", f"127.0.0.1:{port}", "--logdir", logdir, "--duration-ms",
                     "300", "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        objects = _s3().find(f"{BUCKET}/job4")
        assert len(objects) == 1 and objects[0].endswith(".xplane.pb"), objects
        # Nothing local: no "s3:" folder and no profile (the test's cache may be here).
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("s3")]
        assert not list(tmp_path.rglob("*.xplane.pb"))
        assert main(["report", logdir, "--json"]) == 0
        assert json.loads(capsys.readouterr()[0])["steps"]["count"] > 0
    finally:
        worker.kill()
        worker.wait(timeout=30)


@pytest.mark.parametrize("url", ["az://container/logs", "abfs://c/logs"])
def test_a_missing_filesystem_package_is_one_error_before_recording(
        url: str, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("fsspec")
    try:
        import adlfs  # noqa: F401
        pytest.skip("adlfs is installed here")
    except ImportError:
        pass
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StorageError, match=r"stepscope\[azure\]"):
        stepscope.start(url)
    assert not stepscope.is_running() if hasattr(stepscope, "is_running") else True
    for argv in (["report", url], ["serve", "--logdir", url],
                 ["capture", "127.0.0.1:1", "--logdir", url, "--duration-ms", "100"]):
        code = main(argv)
        _, err = capsys.readouterr()
        assert code == 2, (argv, err)
        assert err.startswith("stepscope: error: ") and "stepscope[azure]" in err, err
        assert "Traceback" not in err
    assert not any(tmp_path.iterdir())  # no local folder named "az:"


def test_an_unknown_scheme_is_one_error(tmp_path: Path, capsys: Any,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StorageError, match="fsspec does not know"):
        stepscope.start("nosuchfs://bucket/logs")
    assert main(["report", "nosuchfs://bucket/logs"]) == 2
    assert "fsspec does not know" in capsys.readouterr()[1]
    assert not any(tmp_path.iterdir())


def test_local_names_stay_local(tmp_path: Path) -> None:
    assert locations.as_path(str(tmp_path)) == tmp_path
    assert locations.as_path(f"file://{tmp_path}") == tmp_path
    assert not locations.is_remote(tmp_path) and not locations.is_remote(str(tmp_path))
    assert locations.is_remote("memory://x/y") and locations.url_scheme("S3://b") == "s3"
    assert locations.url_scheme("C:\\logs") is None


def test_memory_filesystem_round_trip(capsys: Any) -> None:
    logdir = "memory://stepscope-test/logs"
    path = _record(logdir, steps=3)
    assert str(path).startswith("memory://")
    assert main(["report", logdir, "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["steps"]["count"] == 3
    assert main(["export", logdir, "--chrome-trace", "-"]) == 0
    assert '"traceEvents"' in capsys.readouterr()[0]


def test_the_profiler_server_writes_where_a_tensorflow_client_names_a_bucket(
        s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import grpc

    from stepscope.remote import protocol

    monkeypatch.chdir(tmp_path)
    worker = subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None
        port = int(worker.stdout.readline().split()[1])
        root = f"s3://{BUCKET}/job5/logs/plugins/profile"

        def ask(repository_root: str) -> Any:
            # As TensorFlow's client asks: the worker writes the profile itself.
            request = protocol.ProfileRequest(duration_ms=300, repository_root=repository_root,
                                              session_id="run1", host_name="worker0")
            request.opts.version = 1
            request.opts.duration_ms = 300
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.unary_unary(
                    protocol.PROFILE_METHOD, request_serializer=lambda m: m.SerializeToString(),
                    response_deserializer=protocol.ProfileResponse.FromString)
                try:
                    return call(request, timeout=60)
                except grpc.RpcError as err:
                    return err

        assert not isinstance(ask(root), grpc.RpcError)
        objects = _s3().find(f"{BUCKET}/job5")
        assert objects == [f"{BUCKET}/job5/logs/plugins/profile/run1/worker0.xplane.pb"]
        refused = ask(f"s3://{BUCKET}/job5/elsewhere")
        assert isinstance(refused, grpc.RpcError)
        assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "plugins/profile" in (refused.details() or "")
        # (The cache directory is the test's own: a background save left by an earlier test
        # may land there on a busy machine.)
        assert [p for p in tmp_path.iterdir() if p.name != "cache"] == [], \
            "nothing is written where the worker runs"
        assert main(["report", f"s3://{BUCKET}/job5/logs", "--json"]) == 0
    finally:
        worker.kill()
        worker.wait(timeout=30)


def test_a_bucket_that_fails_at_stop_does_not_cost_the_profile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: Any, data: bytes) -> None:
        raise OSError("the bucket cannot be reached")

    monkeypatch.setattr("stepscope.formats.xplane_builder.write_remote", refuse)
    stepscope.start("memory://stepscope-test/unreachable")
    with stepscope.Trace("train", step_num=0, _r=1):
        pass
    with pytest.raises(stepscope.LogdirError, match="saved to (.*) instead") as raised:
        stepscope.stop()
    kept = Path(str(raised.value).split("saved to ")[1].split(" instead")[0])
    assert kept.is_file() and kept.name.endswith(".xplane.pb")
    assert main(["report", str(kept), "--json"]) == 0
    kept.unlink()


# == issue 29: every filesystem failure at stop() keeps a complete local copy ================


@pytest.fixture
def unsent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory (where unsent profiles go) and home moved under tmp_path."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "tmp" / "stepscope-unsent"


@pytest.fixture
def dead_gcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """gs:// pointed at a loopback port that takes connections and never answers (a bucket
    behind a network that drops packets); the storage timeouts made short."""
    import fsspec

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    monkeypatch.setitem(fsspec.config.conf, "gcs",
                        {"endpoint_url": f"http://127.0.0.1:{port}", "token": "anon"})
    monkeypatch.setenv(locations.WRITE_TIMEOUT_ENV, "2")
    monkeypatch.setenv(locations.REACH_TIMEOUT_ENV, "2")
    yield listener
    listener.close()


@pytest.fixture
def refused_gcs(monkeypatch: pytest.MonkeyPatch) -> None:
    """gs:// pointed at a loopback port where nothing listens (gcsfs retries for ~35 s)."""
    import fsspec

    monkeypatch.setitem(fsspec.config.conf, "gcs",
                        {"endpoint_url": f"http://127.0.0.1:{_free_port()}", "token": "anon"})
    monkeypatch.setenv(locations.WRITE_TIMEOUT_ENV, "2")
    monkeypatch.setenv(locations.REACH_TIMEOUT_ENV, "2")


def _kept_path(message: str) -> Path:
    return Path(message.split("saved to ")[1].split(" instead")[0])


@pytest.mark.parametrize("endpoint", ["dead_gcs", "refused_gcs"])
def test_an_unreachable_bucket_at_stop_keeps_a_local_copy(
        endpoint: str, unsent: Path, request: pytest.FixtureRequest, capsys: Any) -> None:
    request.getfixturevalue(endpoint)
    stepscope.start("gs://no-such-bucket/logs")
    for step in range(20):
        with stepscope.Trace("train", step_num=step, _r=1):
            pass
    with pytest.raises(stepscope.LogdirError, match="saved to (.*) instead") as raised:
        stepscope.stop()
    message = str(raised.value)
    assert "gs://no-such-bucket/logs/plugins/profile/" in message
    assert "\n" not in message
    if endpoint == "dead_gcs":
        assert "no answer within 2 s" in message
    kept = _kept_path(message)
    assert kept.is_file() and kept.is_relative_to(unsent)
    assert main(["report", str(kept), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"]["count"] > 0


@pytest.mark.parametrize("endpoint", ["dead_gcs", "refused_gcs"])
def test_report_of_an_unreachable_bucket_fails_within_the_timeout(
        endpoint: str, request: pytest.FixtureRequest, capsys: Any) -> None:
    request.getfixturevalue(endpoint)
    assert main(["report", "gs://no-such-bucket/logs"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert line.startswith("stepscope: error: Cannot reach gs://no-such-bucket/logs")
    assert locations.REACH_TIMEOUT_ENV in line


def test_a_local_logdir_that_fails_at_stop_keeps_a_copy(tmp_path: Path, unsent: Path,
                                                        capsys: Any) -> None:
    logdir = tmp_path / "logs"
    stepscope.start(logdir)
    with stepscope.Trace("train", step_num=0, _r=1):
        pass
    # The profile folder is taken away during the run (a cleaner, a full or unmounted disk):
    # a file now stands where the run folder must be made.
    root = logdir / "plugins" / "profile"
    root.rmdir()
    root.write_text("not a folder")
    with pytest.raises(stepscope.LogdirError, match="saved to (.*) instead") as raised:
        stepscope.stop()
    kept = _kept_path(str(raised.value))
    assert kept.is_file() and kept.is_relative_to(unsent)
    assert main(["report", str(kept), "--json"]) == 0


def test_a_profile_that_can_be_written_nowhere_says_what_was_lost(tmp_path: Path) -> None:
    # A file-size limit (what a full disk does to every write) stops the logdir's write and
    # every local copy's: the error says where it tried and what was lost, in one line.
    script = f"""
import resource, signal, tempfile, sys
import stepscope
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
tempfile.tempdir = {str(tmp_path / "tmp")!r}
stepscope.start({str(tmp_path / "logs")!r})
for step in range(2000):
    with stepscope.Trace("train", step_num=step, _r=1):
        pass
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIMIT_FSIZE_HARD
                   if hasattr(resource, "RLIMIT_FSIZE_HARD") else resource.RLIM_INFINITY))
try:
    stepscope.stop()
except stepscope.LogdirError as err:
    print(err)
    sys.exit(3)
"""
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 3, done.stderr
    message = done.stdout.strip()
    assert "\n" not in message
    assert "File too large" in message and "is lost" in message
    assert "stepscope-unsent" in message and "events" in message


# -- 29.5/6/12/13: URL forms, URL outputs, scheme case, credentials -------------------------


def _step_stats_file(path: Path, alloc_micros: int = 5) -> Path:
    """A small RunMetadata: two ops on one device, one allocation record."""
    from stepscope.formats.step_stats_proto import RunMetadata

    meta = RunMetadata()
    dev = meta.step_stats.dev_stats.add()
    dev.device = "/job:localhost/replica:0/task:0/device:CPU:0"
    for i, name in enumerate(["MatMul", "Relu"]):
        node = dev.node_stats.add()
        node.node_name = name
        node.all_start_micros = 1_000_000 + i * 100
        node.op_start_rel_micros = 1
        node.op_end_rel_micros = 50
        node.all_end_rel_micros = 60
        node.timeline_label = f"{name} = {name}(x)"
        mem = node.memory.add()
        mem.allocator_name = "cpu"
        mem.total_bytes = mem.peak_bytes = 4096
        record = mem.allocation_records.add()
        record.alloc_micros = alloc_micros
        record.alloc_bytes = 4096
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(meta.SerializeToString())
    return path


def test_output_urls_are_written_to_the_url(s3_endpoint: str, tmp_path: Path, capsys: Any,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    run = Path(str(_record(str(tmp_path / "logs"), steps=3))).parent
    meta = _step_stats_file(tmp_path / "meta" / "run.pb")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    for argv, key in ((["ops", str(run), "--csv", f"s3://{BUCKET}/out/ops.csv"], "out/ops.csv"),
                      (["export", str(run), "--chrome-trace", f"S3://{BUCKET}/out/t.json"],
                       "out/t.json"),
                      (["timeline", str(meta), "-o", f"s3://{BUCKET}/out/tl.json"],
                       "out/tl.json")):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 0, (argv, err)
        data = _s3().cat_file(f"{BUCKET}/{key}")
        assert data and (b"traceEvents" in data or b"," in data), argv
    assert not any(work.iterdir())  # no ./s3:/… folder


@pytest.mark.parametrize("url", ["simplecache::memory://b/l", "weird:/x://y",
                                 "filecache::s3://b/l"])
def test_chained_and_unknown_url_forms_are_refused(url: str, tmp_path: Path, capsys: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(StorageError, match="chained URL|neither a local path"):
        stepscope.start(url)
    run = Path(str(_record(str(tmp_path / "logs"), steps=2))).parent
    for argv in (["report", url], ["ops", str(run), "--csv", url + "/x.csv"],
                 ["export", str(run), "--chrome-trace", url + "/t.json"]):
        code = main(argv)
        err = capsys.readouterr()[1]
        assert code == 2 and err.startswith("stepscope: error: "), (argv, err)
        assert len(err.strip().splitlines()) == 1
    assert not any(work.iterdir())  # nothing written in the current directory


def test_an_upper_case_scheme_is_the_same_url(s3_endpoint: str, capsys: Any) -> None:
    logdir = f"s3://{BUCKET}/job-case/logs"
    _record(logdir, steps=3)
    assert main(["report", f"S3://{BUCKET}/job-case/logs", "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["steps"]["count"] == 3


@pytest.mark.parametrize("argv", [
    ["report", "s3://AKIDEXAMPLE:wJalrSECRETKEY@nobucket/logs"],
    ["report", "gs://user:hunter2@nobucket/logs"],
    ["ops", "PLACEHOLDER", "--csv", "s3://AKIDEXAMPLE:wJalrSECRETKEY@nobucket/x.csv"],
])
def test_credentials_are_never_echoed(argv: list[str], tmp_path: Path, capsys: Any,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(locations.REACH_TIMEOUT_ENV, "2")
    monkeypatch.setenv(locations.WRITE_TIMEOUT_ENV, "2")
    import fsspec

    monkeypatch.setitem(fsspec.config.conf, "gcs",
                        {"endpoint_url": f"http://127.0.0.1:{_free_port()}", "token": "anon"})
    monkeypatch.setitem(fsspec.config.conf, "s3",
                        {"endpoint_url": f"http://127.0.0.1:{_free_port()}",
                         "client_kwargs": {"region_name": "us-east-1"}})
    if "PLACEHOLDER" in argv:
        argv = [a if a != "PLACEHOLDER" else str(_record(str(tmp_path / "logs"), 2))
                for a in argv]
    code = main(argv)
    err = capsys.readouterr()[1]
    assert code == 2, err
    assert "Traceback" not in err
    for secret in ("wJalrSECRETKEY", "AKIDEXAMPLE", "hunter2"):
        assert secret not in err
    assert "***@" in err
