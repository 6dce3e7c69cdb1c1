"""The engines: a run's hosts analysed in this process, in a local process pool, or as tasks
on a real local Ray cluster give the same run model; a corrupt host is named, not fatal."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stepscope.cli import main
from stepscope.errors import InvalidOptionError
from stepscope.run.engines import HostTask, choose, run_tasks
from stepscope.run.loader import open_run_model

from conftest import FIXTURES

DLRM = FIXTURES / "param/et_replay/tests/inputs/dlrm_kineto"
XSPACE = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"


@pytest.fixture(scope="module")
def run_with_a_bad_host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four real Kineto ranks, one real XSpace host, and one truncated host."""
    run = tmp_path_factory.mktemp("engines") / "run"
    run.mkdir()
    for f in sorted(DLRM.iterdir())[:4]:
        shutil.copyfile(f, run / f.name)
    data = gzip.decompress(sorted(DLRM.iterdir())[4].read_bytes())
    (run / "broken.1694128201547.pt.trace.json").write_bytes(data[: len(data) // 2])
    return run


def _model(run: Path, engine: str) -> dict[str, Any]:
    model = open_run_model(run, use_cache=False, engine=engine)
    out = model.to_dict()
    out["combined"] = model.combined
    return json.loads(json.dumps(out))


def test_the_pool_gives_what_this_process_gives(run_with_a_bad_host: Path) -> None:
    local = _model(run_with_a_bad_host, "local")
    assert set(local["failed"]) == {"broken"}
    assert "not a readable" in local["failed"]["broken"]
    assert len(local["hosts"]) == 4
    assert _model(run_with_a_bad_host, "pool") == local


def test_auto_picks_the_pool_only_when_it_repays() -> None:
    small = [HostTask(f"h{i}", f"/x/{i}", 1 << 20) for i in range(8)]
    big = [HostTask(f"h{i}", f"/x/{i}", 100 << 20) for i in range(2)]
    assert choose("auto", small) == "local"
    assert choose("auto", big) == "pool"
    assert choose("auto", big[:1]) == "local"
    assert choose("ray://10.0.0.1:10001", big) == "ray://10.0.0.1:10001"
    for bad in ("", "threads", "ray:/x", "pool "):
        with pytest.raises(InvalidOptionError):
            choose(bad, big)


def test_the_cli_takes_an_engine(run_with_a_bad_host: Path, capsys: Any) -> None:
    assert main(["report", str(run_with_a_bad_host), "--engine", "pool", "--no-cache",
                 "--json"]) == 0
    out, err = capsys.readouterr()
    assert set(json.loads(out)["failed_hosts"]) == {"broken"}
    assert "host broken could not be read" in err
    with pytest.raises(SystemExit) as exit_:
        main(["report", str(run_with_a_bad_host), "--engine", "spark"])
    assert exit_.value.code == 2
    assert "is not one of" in capsys.readouterr()[1]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             ignore_reinit_error=True)
    yield
    ray.shutdown()


def test_ray_gives_what_this_process_gives(run_with_a_bad_host: Path, local_ray: None,
                                           tmp_path: Path) -> None:
    xspace_run = tmp_path / "xspace"
    xspace_run.mkdir()
    for i in range(3):
        shutil.copyfile(XSPACE, xspace_run / f"worker{i}.xplane.pb")
    for run in (run_with_a_bad_host, xspace_run):
        assert _model(run, "ray") == _model(run, "local")
    seen: list[str] = []
    results = run_tasks([HostTask("w0", str(xspace_run / "worker0.xplane.pb"), 1)], "ray",
                        use_cache=False, done=lambda r: seen.append(r.name))
    assert seen == ["w0"] and results[0].error is None and results[0].model_json


def test_the_web_ui_answers_from_the_model_and_reads_tables_only_when_asked(
        run_with_a_bad_host: Path, tmp_path: Path) -> None:
    import time

    from starlette.testclient import TestClient

    from stepscope.model.run_tables import LazyTables
    from stepscope.web.app import create_app

    logdir = tmp_path / "logs" / "plugins" / "profile"
    shutil.copytree(run_with_a_bad_host, logdir / "run1")
    app = create_app(tmp_path / "logs", use_cache=False, engine="pool")
    with TestClient(app, base_url="http://127.0.0.1") as client:
        for _ in range(600):
            reply = client.get("/api/data", params={"run": "run1", "tool": "overview_page"})
            if reply.status_code != 202:
                break
            time.sleep(0.05)
        assert reply.status_code == 200, reply.text
        assert set(reply.json()["failed_hosts"]) == {"broken"}
        state = app.api.store.wait(logdir / "run1")
        assert state.run is not None
        tables = state.run.profile.hosts
        assert isinstance(tables, LazyTables) and len(tables) == 4
        # The trace viewer's index starts on the first host alone; no other table is read.
        assert set(tables.loaded()) <= {next(iter(tables))}
        ops = client.get("/api/data", params={"run": "run1", "tool": "framework_op_stats"})
        assert ops.status_code == 200
        assert set(tables.loaded()) <= {next(iter(tables))}  # op stats come from the model


# -- issue 29.14: a host that raises an unexpected error gets the same answer on every engine


def test_every_engine_gives_the_same_answer_for_a_host_that_fails_unexpectedly(
        run_with_a_bad_host: Path, local_ray: None, capsys: Any) -> None:
    good = next(p for p in sorted(run_with_a_bad_host.iterdir()) if p.name != "broken.json"
                and p.is_file() and "broken" not in p.name)
    # A file name whose filesystem this process cannot open: StorageError, which the host
    # task did not expect (it expected a bad profile, ProfileFormatError).
    tasks = [HostTask("good", str(good), good.stat().st_size),
             HostTask("odd", "nosuchfs://bucket/odd.xplane.pb", 0)]
    answers = {}
    for engine in ("local", "pool", "ray"):
        results = run_tasks(tasks, engine, use_cache=False)
        assert results[0].error is None and results[0].model_json, engine
        answers[engine] = results[1].error
    assert len(set(answers.values())) == 1, answers
    reason = answers["local"]
    assert reason is not None and "\n" not in reason and "\x1b" not in reason
    assert reason.startswith("it could not be analysed (StorageError: ")
