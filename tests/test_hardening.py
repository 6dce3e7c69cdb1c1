"""Bad input, odd output destinations and hostile names: each gets one clear line, never a
traceback, a hang, a wrong answer or unbounded memory (issue 22's readers, outputs and CSV)."""

from __future__ import annotations

import gzip
import json
import os
import random
import resource
import shutil
import stat
import subprocess
import sys
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest

import stepscope
from stepscope.analysis.csv_table import csv_text, safe_cell
from stepscope.cli import main
from stepscope.errors import OutputError, ProfileFormatError
from stepscope.formats.output_file import open_output, write_output
from stepscope.formats.run_reader import load
from stepscope.formats.xplane_builder import add_plane, new_space, write_space
from stepscope.model import schema
from stepscope.model.logdir import (
    list_runs,
    new_run_dir,
    newest_run,
    remove_abandoned_runs,
)
from stepscope.web.api import Api
from waiting import final_reply

from conftest import FIXTURES

XSPACE = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
KINETO = next(FIXTURES.rglob("*.pt.trace.json.gz"), None) or next(FIXTURES.rglob("*.json.gz"))
COMMANDS = (["report"], ["report", "--json"], ["ops", "--json"], ["kernels", "--json"],
            ["input", "--json"], ["pod", "--json"])

pytestmark = pytest.mark.usefixtures("cache_home")


def run_cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    """``stepscope ARGS`` in this process: exit code, stdout, stderr."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_clean_line(code: int, err: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("stepscope: error: "), err


# -- 1. an empty file is not a profile --------------------------------------------------------


@pytest.mark.parametrize("name", ["host.xplane.pb", "trace.json", "trace.json.gz"])
def test_an_empty_file_is_not_a_profile(name: str, tmp_path: Path, capsys: Any) -> None:
    empty = tmp_path / "run" / name
    empty.parent.mkdir()
    empty.write_bytes(b"")
    with pytest.raises(ProfileFormatError, match="empty"):
        load(empty)
    for command in [*COMMANDS, ["export", "--chrome-trace", str(tmp_path / "out.json")]]:
        for target in (empty, empty.parent):
            code, _, err = run_cli(capsys, command[0], str(target), *command[1:])
            assert_one_clean_line(code, err)
            assert "empty (0 bytes)" in err
    assert not (tmp_path / "out.json").exists()


def test_an_empty_host_beside_good_ones_is_named_and_skipped(tmp_path: Path,
                                                           capsys: Any) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(XSPACE, run / "good.xplane.pb")
    (run / "bad.xplane.pb").write_bytes(b"")
    code, out, err = run_cli(capsys, "report", str(run), "--json")
    assert code == 0
    assert "empty (0 bytes)" in json.loads(out)["failed_hosts"]["bad"]
    assert "stepscope: warning: host bad could not be read" in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_like_a_profile_is_refused_without_blocking(tmp_path: Path,
                                                                 capsys: Any) -> None:
    fifo = tmp_path / "host.xplane.pb"
    os.mkfifo(fifo)  # opening it to read would wait for a writer forever
    code, _, err = run_cli(capsys, "report", str(fifo))
    assert_one_clean_line(code, err)
    assert "neither a regular file nor a directory" in err


# -- 2. names that are not UTF-8 --------------------------------------------------------------


def _profile_with_raw_names(path: Path) -> None:
    """A profile whose host, plane, line, event and stat names hold bytes that are not UTF-8
    (TensorFlow writes names verbatim)."""
    space = new_space("hostQQQQ")
    add_plane(space, 2, "/device:QQQQ")
    plane = add_plane(space, 1, "/host:CPU")
    line = plane.add_line(1, "threadQQQQ", 0)
    for step in range(3):
        start = 1_000_000 + step * 10_000_000
        plane.add_event(line, "stepQQQQ", start, 9_000_000, {"step_num": step, "_r": 1})
        plane.add_event(line, "opQQQQ", start + 1000, 5_000_000,
                        {"tf_op": "opQQQQ:MatMulQQQQ", "noteQQQQ": "valueQQQQ"})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(space.SerializeToString().replace(b"QQQQ", b"\xff\xfe\xc0\x80"))


@pytest.mark.parametrize("no_cache", [False, True])
def test_names_that_are_not_utf8_are_read_with_replacement(tmp_path: Path, capsys: Any,
                                                           no_cache: bool) -> None:
    logdir = tmp_path / "logs"
    _profile_with_raw_names(logdir / "plugins" / "profile" / "run1" / "h.xplane.pb")
    flags = ["--no-cache"] if no_cache else []
    for _ in range(2):  # the second time from the cache
        code, out, err = run_cli(capsys, "report", str(logdir), "--json", *flags)
        assert code == 0, err
        summary = json.loads(out)
        assert summary["steps"]["count"] == 3
        assert "\ufffd" in json.dumps(summary, ensure_ascii=False)
    table = next(iter(load(logdir, use_cache=False).hosts.values()))
    assert all(isinstance(n, str) for n in [*table.names, *table.line_name, *table.hostnames,
                                            *table.stats.stat_names])
    assert any("\ufffd" in n for n in table.names)
    assert any("\ufffd" in p.name for p in table.planes)
    for command in COMMANDS:
        code, out, err = run_cli(capsys, command[0], str(logdir), *command[1:], *flags)
        assert code == 0, err


def test_names_that_are_not_utf8_over_http(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from stepscope.web.app import create_app

    _profile_with_raw_names(tmp_path / "plugins" / "profile" / "run1" / "h.xplane.pb")
    with TestClient(create_app(tmp_path), base_url="http://127.0.0.1") as client:
        (run,) = client.get("/api/runs").json()["runs"]
        for tool in ("overview_page", "framework_op_stats", "trace_viewer"):
            reply = _final(client, {"run": run["name"], "tool": tool})
            if tool == "trace_viewer" and reply.status_code == 404:
                continue  # the trace viewer answers on its own routes
            assert reply.status_code == 200, (tool, reply.text)
            assert "\ufffd" in json.dumps(reply.json(), ensure_ascii=False) or \
                tool != "overview_page"


# -- 3. a gzip bomb ---------------------------------------------------------------------------


def _bomb(path: Path, inflated: int) -> None:
    """Valid gzip of a trace padded with ``inflated`` bytes of spaces (a thousandfold)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(b'{"traceEvents":[')]
    block = b" " * (1 << 22)
    for _ in range(inflated // len(block)):
        parts.append(packer.compress(block))
    parts += [packer.compress(b"]}"), packer.flush()]
    path.write_bytes(b"".join(parts))


# The peak is this process's own high-water mark (VmHWM; ru_maxrss would include the
# forked parent's memory from before exec).
BOMB_CHILD = """
import resource, sys
from stepscope.cli import main
code = main(["report", sys.argv[1]])
try:
    with open("/proc/self/status") as f:
        peak_mb = next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 1024
except OSError:
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"PEAK {peak_mb:.0f}", file=sys.stderr)
sys.exit(code)
"""


def test_a_gzip_bomb_stops_at_the_bound_with_a_reason(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    _bomb(bomb, 1 << 30)  # 1 MB on disk, 1 GiB inflated
    assert bomb.stat().st_size < 2 << 20
    env = {**os.environ, "STEPSCOPE_MAX_TRACE_GB": "0.0625", "STEPSCOPE_NO_CACHE": "1"}
    done = subprocess.run([sys.executable, "-c", BOMB_CHILD, str(bomb)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "more than the 0.06 GiB" in done.stderr
    assert "STEPSCOPE_MAX_TRACE_GB" in done.stderr
    peak_mb = float(done.stderr.split("PEAK ")[1])
    # The same command on a small honest trace: what the interpreter and libraries take.
    honest = tmp_path / "honest.json.gz"
    honest.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    base = subprocess.run([sys.executable, "-c", BOMB_CHILD, str(honest)],
                          capture_output=True, text=True, env=env, timeout=120)
    base_mb = float(base.stderr.split("PEAK ")[1])
    assert peak_mb < base_mb + 64 * 1.25 + 100, (peak_mb, base_mb)  # the bound, and slack


def test_the_bound_can_be_raised_and_honest_traces_pass(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from stepscope.formats.kineto_to_tables import max_document_bytes

    monkeypatch.delenv("STEPSCOPE_MAX_TRACE_GB", raising=False)
    assert max_document_bytes() >= 256 * 2**20
    monkeypatch.setenv("STEPSCOPE_MAX_TRACE_GB", "2")
    assert max_document_bytes() == 2 * 2**30
    for junk in ("", "x", "-1", "nan"):
        monkeypatch.setenv("STEPSCOPE_MAX_TRACE_GB", junk)
        assert max_document_bytes() >= 256 * 2**20
    # A real trace in two gzip members still loads, below a small bound.
    monkeypatch.setenv("STEPSCOPE_MAX_TRACE_GB", "0.5")
    text = gzip.decompress(KINETO.read_bytes())
    two = tmp_path / "two.json.gz"
    two.write_bytes(gzip.compress(text[:1000]) + gzip.compress(text[1000:]))
    assert len(load(two, use_cache=False).hosts) == 1
    monkeypatch.setenv("STEPSCOPE_MAX_TRACE_GB", str(len(text) / 2 / 2**30))
    with pytest.raises(ProfileFormatError, match="inflates to more than"):
        load(two, use_cache=False)
    plain = tmp_path / "plain.json"
    plain.write_bytes(text)
    with pytest.raises(ProfileFormatError, match="more than the"):
        load(plain, use_cache=False)


# -- 4. output destinations -------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("small") / "run"
    run.mkdir()
    shutil.copyfile(XSPACE, run / "host.xplane.pb")
    return run


OUTPUT_COMMANDS = [["ops", "--csv"], ["kernels", "--csv"], ["input", "--csv"], ["pod", "--csv"],
                   ["export", "--chrome-trace"]]


@pytest.mark.parametrize("command", OUTPUT_COMMANDS, ids=lambda c: c[0])
def test_an_output_that_is_a_directory_or_unwritable_is_one_line(
        command: list[str], small_run: Path, tmp_path: Path, capsys: Any) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    blocker = dest / "a-file"
    blocker.write_text("")
    for target, why in ((dest, "is a directory"), (blocker / "out", "Not a directory"),
                        (dest / "missing" / "out", "No such file")):
        code, _, err = run_cli(capsys, command[0], str(small_run), command[1], str(target))
        assert_one_clean_line(code, err)
        assert why in err
    assert sorted(p.name for p in dest.iterdir()) == ["a-file"]  # nothing half-written


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_an_output_in_a_read_only_directory_is_one_line(small_run: Path, tmp_path: Path,
                                                        capsys: Any) -> None:
    tmp_path.chmod(0o555)
    try:
        for command in OUTPUT_COMMANDS:
            code, _, err = run_cli(capsys, command[0], str(small_run), command[1],
                                   str(tmp_path / "out"))
            assert_one_clean_line(code, err)
            assert "Permission denied" in err
    finally:
        tmp_path.chmod(0o755)


@pytest.mark.parametrize("command", OUTPUT_COMMANDS, ids=lambda c: c[0])
def test_a_symlinked_output_writes_its_target(command: list[str], small_run: Path,
                                              tmp_path: Path, capsys: Any) -> None:
    target = tmp_path / "real.out"
    target.write_text("old")
    link = tmp_path / "link.out"
    link.symlink_to(target)
    code, _, err = run_cli(capsys, command[0], str(small_run), command[1], str(link))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() != "old" and target.stat().st_size > 10


@pytest.mark.parametrize("command", OUTPUT_COMMANDS, ids=lambda c: c[0])
def test_special_files_are_written_in_place(command: list[str], small_run: Path,
                                            tmp_path: Path, capsys: Any) -> None:
    code, _, err = run_cli(capsys, command[0], str(small_run), command[1], "/dev/null")
    assert code == 0, err
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    code, _, err = run_cli(capsys, command[0], str(small_run), command[1], str(fifo))
    reader.join(timeout=60)
    assert code == 0, err
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and got and len(got[0]) > 10
    if os.path.exists("/dev/full"):
        code, _, err = run_cli(capsys, command[0], str(small_run), command[1], "/dev/full")
        assert_one_clean_line(code, err)
        assert "No space left" in err
        assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


@pytest.mark.parametrize("command", OUTPUT_COMMANDS, ids=lambda c: c[0])
def test_dash_is_standard_output(command: list[str], small_run: Path, tmp_path: Path,
                                 capfdbinary: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    monkeypatch.chdir(dest)
    code = main([command[0], str(small_run), command[1], "-"])
    out, _ = capfdbinary.readouterr()
    assert code == 0
    assert len(out) > 10
    assert not list(dest.iterdir())  # no file named "-"


def test_open_output_keeps_the_old_file_when_writing_fails(tmp_path: Path) -> None:
    path = tmp_path / "keep.csv"
    path.write_text("old")
    with pytest.raises(RuntimeError), open_output(path) as out:
        out.write(b"half")
        raise RuntimeError("interrupted")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir() if p.name != "cache"] == ["keep.csv"]
    write_output(path, b"new")
    assert path.read_text() == "new"
    with pytest.raises(OutputError, match="is a directory"):
        write_output(tmp_path, b"x")


# -- 11. CSV formula injection ----------------------------------------------------------------


def test_csv_cells_a_spreadsheet_would_run_are_quoted() -> None:
    for bad in ('=HYPERLINK("http://evil.example")', "+1+cmd", "-2+3", "@SUM(A1)", "\tx",
                "\rx", "=1"):
        assert safe_cell(bad) == "'" + bad
    for fine in ("-1.5", "+3", "-0.25e-3", "12", "op", "", "a=b", 3, -4.5, None, True):
        assert safe_cell(fine) == fine
    assert csv_text(["a"], [["=x"], [-1]]) == "a\n'=x\n-1\n"


def test_csv_cells_with_nul_are_written_on_every_python() -> None:
    """Python 3.10's csv writer refuses a NUL (3.11+ quotes it): one replacement everywhere."""
    assert safe_cell("a\0b") == "a\ufffdb" and safe_cell("=\0") == "'=\ufffd"
    assert csv_text(["name"], [["f\0"], ["g"]]) == "name\nf\ufffd\ng\n"


@pytest.fixture(scope="module")
def hostile_names(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("hostile") / "logs"
    stepscope.start(logdir, options=stepscope.ProfilerOptions(counter_interval_ms=0))
    for step in range(3):
        with stepscope.Trace("train", step_num=step, _r=1):
            for name in ('=HYPERLINK("http://evil.example/","x")', "@SUM(1)", "+cmd|' /C calc'!A0",
                         "-2+3"):
                with stepscope.Trace(name):
                    sum(range(2000))
    stepscope.stop()
    return logdir


def test_ops_csv_neutralises_formulas(hostile_names: Path, capsys: Any) -> None:
    code, out, err = run_cli(capsys, "ops", str(hostile_names), "--csv", "-")
    assert code == 0, err
    cells = [cell for line in out.splitlines()[1:] for cell in line.split(",")]
    names = [c.strip('"') for c in cells if c.strip('"').startswith(("'", "=", "+", "-", "@"))]
    assert names and all(n.startswith("'") for n in names), names


def test_http_csv_neutralises_formulas(hostile_names: Path) -> None:
    api = Api(hostile_names, use_cache=False)
    (run,) = list_runs(hostile_names)
    api.store.wait(list_runs(hostile_names)[run])
    name, text = api.csv(run, None, "framework_op_stats", {})
    assert name.endswith(".csv")
    assert "'=HYPERLINK" in text and "\n=HYPERLINK" not in text and ",=HYPERLINK" not in text
    assert "'@SUM(1)" in text and "'-2+3" in text


# -- also: negative durations, one-line warnings, abandoned runs --------------------------------


def test_negative_durations_are_clamped_and_counted(tmp_path: Path, capsys: Any) -> None:
    space = new_space("h")
    plane = add_plane(space, 1, "/host:CPU")
    line = plane.add_line(1, "main", 0)
    for step in range(3):
        start = 1_000_000 + step * 10_000_000
        plane.add_event(line, "train", start, 9_000_000, {"step_num": step, "_r": 1})
        event = plane.add_event(line, "op", start + 1000, 1000)
        event.duration_ps = -5_000_000_000 if step == 1 else 1_000_000
    write_space(space, tmp_path / "run" / "h.xplane.pb")
    table = next(iter(load(tmp_path / "run", use_cache=False).hosts.values()))
    assert int(table.duration_ns.min()) == 0
    assert table.planes[0].stats[schema.NEGATIVE_DURATIONS] == 1
    code, out, _ = run_cli(capsys, "report", str(tmp_path / "run"), "--json")
    assert code == 0
    assert all(s >= 0 for s in _numbers(json.loads(out)))

    trace = {"traceEvents": [{"name": "a", "ph": "X", "ts": 10, "dur": -7, "pid": 1, "tid": 1},
                             {"name": "b", "ph": "X", "ts": 20, "dur": 3, "pid": 1, "tid": 1}]}
    (tmp_path / "t.json").write_text(json.dumps(trace))
    kineto = next(iter(load(tmp_path / "t.json", use_cache=False).hosts.values()))
    assert int(kineto.duration_ns.min()) == 0
    assert sum(p.stats.get(schema.NEGATIVE_DURATIONS, 0) for p in kineto.planes) == 1


def _numbers(value: Any) -> list[float]:
    """Every duration-like number in a JSON value (keys ending in _ms or _us)."""
    found: list[float] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (int, float)) and str(key).endswith(("_ms", "_us")):
                found.append(float(item))
            else:
                found += _numbers(item)
    elif isinstance(value, list):
        for item in value:
            found += _numbers(item)
    return found


def test_the_cache_warning_is_one_line(small_run: Path, tmp_path: Path, capsys: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from stepscope.model import cache

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(cache, "_warned_dirs", set())
    code, _, err = run_cli(capsys, "report", str(small_run))
    assert code == 0
    warning_lines = [line for line in err.splitlines() if "cache" in line]
    assert len(warning_lines) == 1
    assert warning_lines[0].startswith("stepscope: warning: cannot write the cache in ")


def test_abandoned_run_folders_are_skipped_and_cleaned_up(tmp_path: Path) -> None:
    root = tmp_path / "plugins" / "profile"
    good = root / "2024_01_01_00_00_00"
    good.mkdir(parents=True)
    shutil.copyfile(XSPACE, good / "h.xplane.pb")
    killed_stop = root / "2024_01_02_00_00_00"  # stop() killed mid-write
    killed_stop.mkdir()
    (killed_stop / ".h.xplane.pb.abc123.tmp").write_bytes(b"half")
    killed_client = root / "2024_01_03_00_00_00"  # a capture client killed before any answer
    killed_client.mkdir()
    mine = root / "notes"
    mine.mkdir()
    (mine / "README").write_text("not a profile, not ours")
    assert list(list_runs(tmp_path)) == ["2024_01_01_00_00_00"]
    assert newest_run(tmp_path) == good  # (the one a server opens first)
    assert newest_run(tmp_path / "missing") is None and newest_run(killed_client) is None
    now = max(p.stat().st_mtime for p in root.rglob("*"))
    # Young: perhaps a write still under way, so left alone.
    assert remove_abandoned_runs(tmp_path, now=now + 60) == []
    removed = remove_abandoned_runs(tmp_path, now=now + 7200)
    assert sorted(p.name for p in removed) == ["2024_01_02_00_00_00", "2024_01_03_00_00_00"]
    assert sorted(p.name for p in root.iterdir()) == ["2024_01_01_00_00_00", "notes"]
    # A new capture tidies up the same way.
    (root / "2024_01_04_00_00_00").mkdir()
    os.utime(root / "2024_01_04_00_00_00", (now - 10_000, now - 10_000))
    from datetime import datetime

    new_run_dir(tmp_path, datetime.fromtimestamp(now))
    assert not (root / "2024_01_04_00_00_00").exists()


# -- a fuzz corpus for every reader and command -----------------------------------------------


def _corpus(seed: int) -> dict[str, tuple[str, bytes]]:
    """Damaged versions of a real XSpace and a real Kineto trace: name → (file name, bytes)."""
    rng = random.Random(seed)
    xspace = XSPACE.read_bytes()
    kineto_text = gzip.decompress(KINETO.read_bytes())
    cases: dict[str, tuple[str, bytes]] = {}
    for fraction in (0.0001, 0.01, 0.3, 0.5, 0.9, 0.999):
        cut = max(1, int(len(xspace) * fraction))
        cases[f"xspace cut at {fraction}"] = ("h.xplane.pb", xspace[:cut])
        cut = max(1, int(len(kineto_text) * fraction))
        cases[f"json cut at {fraction}"] = ("t.json", kineto_text[:cut])
        cases[f"gzip cut at {fraction}"] = ("t.json.gz", gzip.compress(kineto_text)[:cut])
    for i in range(4):
        flipped = bytearray(xspace)
        for _ in range(20):
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        cases[f"xspace bit flips {i}"] = ("h.xplane.pb", bytes(flipped))
        cases[f"random {i}"] = ("h.xplane.pb", rng.randbytes(rng.randrange(1, 5000)))
        cases[f"random json {i}"] = ("t.json", rng.randbytes(rng.randrange(1, 5000)))
    # Absurd lengths: a field that claims far more bytes than the file has.
    cases["absurd length"] = ("h.xplane.pb", b"\x0a\xff\xff\xff\xff\x0f" + xspace[:100])
    cases["absurd values"] = ("t.json", json.dumps({"traceEvents": [
        {"name": "x" * 10, "ph": "X", "ts": 1e300, "dur": -1e300, "pid": 2**70, "tid": None},
        {"name": None, "ph": "X", "ts": "soon", "dur": [], "pid": {}, "tid": 1},
        {"ph": "C", "ts": 5, "pid": 1, "args": {"v": "NaN"}}]}).encode())
    cases["deep json"] = ("t.json", b"[" * 100_000 + b"]" * 100_000)
    cases["not utf8 json"] = ("t.json", b'{"traceEvents": [{"name": "\xff\xfe"}]}')
    return cases


def test_fuzz_corpus_gives_a_profile_or_one_line(tmp_path: Path, capsys: Any) -> None:
    outcomes: dict[str, int] = {}
    for index, (case, (name, data)) in enumerate(_corpus(22).items()):
        path = tmp_path / f"case{index}" / name
        path.parent.mkdir()
        path.write_bytes(data)
        for command in (["report", "--json"], ["ops", "--json"], ["export", "--chrome-trace",
                                                                   str(tmp_path / "o.json")]):
            code, out, err = run_cli(capsys, command[0], str(path), *command[1:])
            assert "Traceback" not in err, (case, err)
            if code == 2:
                assert_one_clean_line(code, err)
            else:
                assert code == 0, (case, command, err)
            outcomes[f"{case} {command[0]}"] = code
    assert 2 in outcomes.values()  # the corpus does damage that is caught
    # Resource use stays bounded: nothing here may grow far past the inputs.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 8 * 2**20  # KiB: 8 GiB


def test_fuzz_corpus_xspace_decodes_the_same_on_two_threads(monkeypatch: Any) -> None:
    """A big file's walk on two threads meets the damage as the one walk does: the same
    columns or the same error, wherever the file is cut between the halves."""
    from test_xspace_decode_threads import both_ways

    for name, data in _corpus(22).values():
        if name.endswith(".xplane.pb"):
            both_ways(monkeypatch, data, points=12)


# == issue 29: nothing lost, nothing hidden ===================================================
# -- 29.1/2 a bad name or value costs that value, never the profile; UTF-8 only --------------


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("this value has no text")

    __repr__ = __str__


def test_bad_names_and_values_are_replaced_and_counted(tmp_path: Path) -> None:
    xplane_pb2 = pytest.importorskip("tensorflow.tsl.profiler.protobuf.xplane_pb2")
    stepscope.start(tmp_path / "logs")
    try:
        for step in range(1000):
            with stepscope.Trace("train", step_num=step, _r=1), stepscope.Trace(
                    "bad\ud800name", **{"key\udc00": "value\ud800", "obj": _Unprintable()}):
                pass
    finally:
        path = stepscope.stop()
    assert path is not None and path.is_file()
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())  # TensorFlow refuses invalid UTF-8
    host = next(p for p in space.planes if p.name == schema.HOST_PLANE)
    names = {md.name for md in host.event_metadata.values()}
    assert "bad\ufffdname" in names and "train" in names
    stat_names = {md.name for md in host.stat_metadata.values()}
    assert "key\ufffd" in stat_names
    texts = {s.str_value for line in host.lines for e in line.events for s in e.stats}
    assert {"value\ufffd", "<unprintable _Unprintable>"} <= texts
    env = next(p for p in space.planes if p.name == schema.TASK_ENV_PLANE)
    env_stats = {env.stat_metadata[s.metadata_id].name: s for s in env.stats}
    # The three distinct bad texts, and the 1,000 unprintable objects (one per event).
    assert env_stats[schema.ENV_REPLACED_VALUES].int64_value == 1003
    assert any("replaced 1003" in w for w in space.warnings)
    summary = load(path).hosts
    assert summary  # and our own reader opens it


# -- 29.20 temporary files a killed writer left are cleaned by the next write ----------------


def test_temporaries_of_a_killed_export_are_removed_by_the_next_write(tmp_path: Path) -> None:
    out = tmp_path / "out" / "trace.json"
    out.parent.mkdir()
    # A writer killed (SIGKILL) mid-write: its temporary file stays beside the output.
    script = ("import os, signal, sys\n"
              "from stepscope.formats.output_file import open_output\n"
              f"with open_output({str(out)!r}) as f:\n"
              "    f.write(b'half'); f.flush()\n"
              "    os.kill(os.getpid(), signal.SIGKILL)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, timeout=120)
    assert done.returncode == -9
    left = [p.name for p in out.parent.iterdir()]
    assert len(left) == 1 and left[0].startswith(".trace.json.") and left[0].endswith(".tmp")
    # One of an older stepscope (no process id in the name), an hour old; and an unrelated file.
    old = out.parent / ".trace.json.abcd1234.tmp"
    old.write_bytes(b"old")
    os.utime(old, (1, 1))
    recent = out.parent / ".trace.json.efgh5678.tmp"  # may be another writer's, under way
    recent.write_bytes(b"new")
    other = out.parent / ".other.json.123.abcd.tmp"
    other.write_bytes(b"not ours")
    write_output(out, b"{}")
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(
        [".other.json.123.abcd.tmp", ".trace.json.efgh5678.tmp", "trace.json"])
    assert out.read_bytes() == b"{}"


# -- 29.8/9/10/11 stats pointing nowhere, ref 2^64-1, bytes in HLO names, StepStats times ----

JAX_GPU = FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb"


def _dangling_stats_profile(path: Path) -> None:
    """Host events with a stat whose metadata id has no entry and refs pointing nowhere
    (4242, 2^64-1); a device plane with stats but no stat metadata at all."""
    space = new_space("h")
    host = add_plane(space, 1, "/host:CPU")
    line = host.add_line(1, "main", 0)
    for step in range(4):
        start = 1_000_000 + step * 10_000_000
        host.add_event(line, "train", start, 9_000_000, {"step_num": step, "_r": 1,
                                                          "zz_last_stat": 1})
        event = host.add_event(line, "matmul", start + 1000, 5_000_000, {"note": "x"})
        event.stats.add(metadata_id=999, int64_value=5)
        event.stats.add(metadata_id=host.stat_metadata_id("note"), ref_value=4242)
        event.stats.add(metadata_id=host.stat_metadata_id("note"), ref_value=2**64 - 1)
    host.plane.stats.add(metadata_id=host.stat_metadata_id("note"), ref_value=2**64 - 1)
    device = space.planes.add(id=2, name="/device:GPU:0")
    dline = device.lines.add(id=1, name="stream 1", timestamp_ns=0)
    device.event_metadata[1].id = 1
    device.event_metadata[1].name = "kernel"
    for i in range(4):
        event = dline.events.add(metadata_id=1, offset_ps=(2_000_000 + i * 10_000_000) * 1000,
                                 duration_ps=10**9)
        event.stats.add(metadata_id=3, int64_value=7)
        event.stats.add(metadata_id=4, ref_value=2**64 - 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(space.SerializeToString())


def _bad_xla_profile(path: Path) -> None:
    """A real JAX GPU profile with refs of 2^64-1 and dangling stat ids on every plane, and
    bytes that are not UTF-8 in its HLO op names (same length: every length prefix holds)."""
    from stepscope.formats.xplane_proto import XSpace

    space = XSpace()
    space.ParseFromString(JAX_GPU.read_bytes())
    for plane in space.planes:
        some_stat = max(plane.stat_metadata or [1])
        for xline in plane.lines:
            for event in xline.events[:50]:
                event.stats.add(metadata_id=987654, int64_value=5)
                event.stats.add(metadata_id=some_stat, ref_value=2**64 - 1)
        plane.stats.add(metadata_id=some_stat, ref_value=2**64 - 1)
        plane.stats.add(metadata_id=777777, ref_value=2**64 - 1)
    data = space.SerializeToString()
    assert b"fusion" in data
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.replace(b"fusion", b"\xff\xfesion"))


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "python"])
def test_stats_pointing_nowhere_are_named_so(tmp_path: Path, pure: bool,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    if pure:
        monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")
    _dangling_stats_profile(tmp_path / "run" / "h.xplane.pb")
    table = next(iter(load(tmp_path / "run", use_cache=False).hosts.values()))
    st = table.stats
    assert int(st.name.min()) >= 0
    names = [st.stat_names[int(c)] for c in st.name.tolist()]
    assert names.count("<unknown stat>") == 12  # 999 on 4 host events, 3 and 4 on 4 kernels
    values = [st.value_of(i) for i in range(len(st.name)) if int(st.kind[i]) == 6]
    assert values and set(values) == {"<unknown stat>"}  # never "zz_last_stat"
    host_plane = next(p for p in table.planes if p.name == "/host:CPU")
    assert host_plane.stats["note"] == "<unknown stat>"


def test_stats_pointing_nowhere_over_http(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from stepscope.web.app import create_app

    _dangling_stats_profile(tmp_path / "plugins" / "profile" / "run1" / "h.xplane.pb")
    with TestClient(create_app(tmp_path), base_url="http://127.0.0.1") as client:
        base = {"run": "run1"}
        for tool in ("overview_page", "framework_op_stats", "kernel_stats", "pod_viewer",
                     "trace_viewer"):
            reply = _final(client, {**base, "tool": tool})
            assert reply.status_code == 200, (tool, reply.text)
        for name in ("matmul", "kernel"):
            found = client.get("/api/trace/search", params={**base, "q": name}).json()
            reply = client.get("/api/trace/event",
                               params={**base, "id": str(found["matches"]["id"][0])})
            assert reply.status_code == 200, reply.text
            stats = reply.json()["stats"]
            assert "<unknown stat>" in stats and "zz_last_stat" not in stats
            assert "zz_last_stat" not in stats.values()


def _final(client: Any, params: dict[str, str]) -> Any:
    """The final answer of /api/data: not 202 (still working), not the trace viewer's
    coarse overview (its index still building)."""
    return final_reply(client, "/api/data", params)


def test_refs_beyond_range_and_bytes_in_hlo_names(tmp_path: Path, capsys: Any) -> None:
    run = tmp_path / "plugins" / "profile" / "run1"
    _bad_xla_profile(run / "h.xplane.pb")
    for command in (["report"], ["report", "--json"], ["xla", "--json"], ["ops", "--json"],
                    ["kernels", "--json"], ["memory", "--json"],
                    ["export", "--chrome-trace", str(tmp_path.parent / "o.json")]):
        code, out, err = run_cli(capsys, command[0], str(run), *command[1:], "--no-cache")
        assert code == 0, (command, err)
    code, out, err = run_cli(capsys, "xla", str(run), "--json", "--no-cache")
    ops = json.loads(out)["ops"]
    fused = next(op for op in ops if "\ufffd" in op["name"])
    module = json.loads(out)["programs"][0]
    code, out, err = run_cli(capsys, "xla-graph", str(run), "--json", "--module",
                             str(module.get("id") or module.get("program_id")),
                             "--op", fused["name"])
    assert code == 0, err
    assert "\ufffd" in json.dumps(json.loads(out), ensure_ascii=False)

    from starlette.testclient import TestClient

    from stepscope.web.app import create_app

    with TestClient(create_app(tmp_path), base_url="http://127.0.0.1") as client:
        for tool in ("overview_page", "framework_op_stats", "kernel_stats", "op_profile",
                     "hlo_op_stats", "roofline_model", "memory_viewer", "pod_viewer"):
            reply = _final(client, {"run": "run1", "tool": tool})
            assert reply.status_code == 200, (tool, reply.text[:300])
        reply = _final(client, {"run": "run1", "tool": "graph_viewer",
                                "module": str(module.get("id") or module.get("program_id")),
                                "op": fused["name"]})
        assert reply.status_code == 200, reply.text[:300]


@pytest.mark.parametrize("alloc_micros", [0, 1, 2**62])
def test_step_stats_allocation_times_that_are_unset_or_absurd(tmp_path: Path, capsys: Any,
                                                              alloc_micros: int) -> None:
    from stepscope.formats.step_stats_proto import RunMetadata

    meta = RunMetadata()
    dev = meta.step_stats.dev_stats.add()
    dev.device = "/job:localhost/replica:0/task:0/device:CPU:0"
    for i in range(3):
        node = dev.node_stats.add()
        node.node_name = f"op{i}"
        node.all_start_micros = 1_700_000_000_000_000 + i * 100  # epoch microseconds
        node.op_end_rel_micros, node.all_end_rel_micros = 50, 60
        record = node.memory.add(allocator_name="cpu").allocation_records.add()
        record.alloc_micros = alloc_micros if i == 0 else node.all_start_micros + 1
        record.alloc_bytes = 64
    path = tmp_path / "run.pb"
    path.write_bytes(meta.SerializeToString())
    for command in (["report"], ["ops", "--json"], ["memory", "--json"],
                    ["export", "--chrome-trace", str(tmp_path / "o.json")],
                    ["timeline", "-o", str(tmp_path / "t.json")]):
        code, _, err = run_cli(capsys, command[0], str(path), *command[1:], *(
            ["--no-cache"] if command[0] != "timeline" else []))
        assert code == 0, (command, err)
    plane = next(p for p in load(path, use_cache=False).hosts["run"].planes
                 if p.name == schema.HOST_PLANE)
    assert plane.stats[schema.REPLACED_ALLOCATION_TIMES] == 1


# -- 29.18 a .json that is not a profile at the top of a logdir hides nothing ----------------


@pytest.mark.parametrize("layout", ["plugins", "subfolders"])
def test_a_config_json_beside_the_runs_is_skipped_and_named(tmp_path: Path, capsys: Any,
                                                            layout: str) -> None:
    from starlette.testclient import TestClient

    from stepscope.web.app import create_app

    logdir = tmp_path / "logs"
    run_dir = logdir / ("plugins/profile/run1" if layout == "plugins" else "run1")
    _dangling_stats_profile(run_dir / "h.xplane.pb")
    (logdir / "config.json").write_text('{"lr": 0.01}')
    (logdir / "metrics.json.gz").write_bytes(gzip.compress(b'{"loss": [1, 2]}'))
    code, out, err = run_cli(capsys, "report", str(logdir), "--json")
    assert code == 0, err
    assert json.loads(out)["steps"]["count"] >= 1
    assert f"skipped {logdir / 'config.json'}" in err
    assert f"skipped {logdir / 'metrics.json.gz'}" in err
    assert list(list_runs(logdir)) == ["run1"]
    with TestClient(create_app(logdir), base_url="http://127.0.0.1") as client:
        runs = [r["name"] for r in client.get("/api/runs").json()["runs"]]
        assert runs == ["run1"]
    # A folder of only such files is still one clear error, not a traceback.
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "config.json").write_text('{"lr": 0.01}')
    code, _, err = run_cli(capsys, "report", str(lone))
    assert_one_clean_line(code, err)


# -- 29.17 dropped events are shown wherever the run is shown --------------------------------


def test_dropped_events_are_shown_with_the_steps_they_cost(tmp_path: Path,
                                                           capsys: Any) -> None:
    from starlette.testclient import TestClient

    from stepscope.web.app import create_app

    logdir = tmp_path / "logs"
    stepscope.start(logdir, stepscope.ProfilerOptions(max_events=400, counter_interval_ms=0,
                                                      python_tracer_level=0))
    from stepscope.errors import StepscopeWarning

    with pytest.warns(StepscopeWarning, match="dropped"):
        try:
            for step in range(50):
                with stepscope.Trace("train", step_num=step, _r=1):
                    for _ in range(20):
                        with stepscope.Trace("work"):
                            pass
        finally:
            stepscope.stop()
    code, out, err = run_cli(capsys, "report", str(logdir), "--json")
    assert code == 0, err
    summary = json.loads(out)
    ((host, dropped),) = summary["dropped_events"].items()
    assert dropped["count"] > 0 and dropped["max_events"] == 400
    assert dropped["recorded"] == 400
    shown = summary["steps"]["count"]
    assert shown < 50
    assert dropped["last_step"] is not None and dropped["last_step"] < 49
    assert dropped["missing_s"] is not None and dropped["after_s"] is not None
    assert f"{dropped['count']:,} events were dropped" in dropped["message"]
    assert f"step {dropped['last_step']}" in dropped["message"]
    code, out, err = run_cli(capsys, "report", str(logdir))
    assert code == 0
    assert "events were dropped" in " ".join(out.split())
    with TestClient(create_app(logdir), base_url="http://127.0.0.1") as client:
        (run,) = client.get("/api/runs").json()["runs"]
        for params in ({}, {"host": host}):
            reply = _final(client, {"run": run["name"], "tool": "overview_page", **params})
            assert reply.json()["dropped_events"][host]["count"] == dropped["count"]
    # From the cache too.
    code, out, err = run_cli(capsys, "report", str(logdir), "--json")
    assert json.loads(out)["dropped_events"] == summary["dropped_events"]


# -- 29.16 a gzip bomb is refused from its compression ratio, early --------------------------


def test_a_gzip_bomb_is_refused_from_its_ratio_before_the_bound(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    _bomb(bomb, 1 << 30)  # 1 MB on disk, 1 GiB inflated
    # A bound of 0.5 GiB: reading up to it would take half a gigabyte; the ratio (about
    # 1000:1) projects past it after the first 16 MiB.
    env = {**os.environ, "STEPSCOPE_MAX_TRACE_GB": "0.5", "STEPSCOPE_NO_CACHE": "1"}
    done = subprocess.run([sys.executable, "-c", BOMB_CHILD, str(bomb)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "(a gzip bomb?)" in done.stderr and "STEPSCOPE_MAX_TRACE_GB" in done.stderr
    peak_mb = float(done.stderr.split("PEAK ")[1])
    honest = tmp_path / "honest.json.gz"
    honest.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    base = subprocess.run([sys.executable, "-c", BOMB_CHILD, str(honest)],
                          capture_output=True, text=True, env=env, timeout=120)
    base_mb = float(base.stderr.split("PEAK ")[1])
    assert peak_mb < base_mb + 100, (peak_mb, base_mb)  # not the 512 MiB of the bound
    # An honest trace inflating less than the ratio loads, whatever its size.
    text = gzip.decompress(KINETO.read_bytes())
    assert len(text) / KINETO.stat().st_size < 200
    assert len(load(KINETO, use_cache=False).hosts) == 1


# -- 29.15 amplification: empty containers cost nothing, names cost linearly -----------------


def _with_empty_planes(path: Path, count: int) -> None:
    """A small real profile followed by ``count`` empty planes (2 bytes each)."""
    space = new_space("h")
    host = add_plane(space, 1, "/host:CPU")
    line = host.add_line(1, "main", 0)
    for step in range(5):
        host.add_event(line, "train", 1000 + step * 100, 50, {"step_num": step, "_r": 1})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(space.SerializeToString() + b"\x0a\x00" * count)


def test_a_million_empty_planes_cost_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run" / "h.xplane.pb"
    _with_empty_planes(run, 1_500_000)  # 3 MB
    env = {**os.environ, "STEPSCOPE_NO_CACHE": "1"}
    done = subprocess.run([sys.executable, "-c", BOMB_CHILD, str(run.parent)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    peak_mb = float(done.stderr.split("PEAK ")[1])
    small = tmp_path / "small" / "h.xplane.pb"
    _with_empty_planes(small, 0)
    base = subprocess.run([sys.executable, "-c", BOMB_CHILD, str(small.parent)],
                          capture_output=True, text=True, env=env, timeout=300)
    base_mb = float(base.stderr.split("PEAK ")[1])
    assert peak_mb < base_mb + 150, (peak_mb, base_mb)  # was 3.7 GB


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "python"])
def test_empty_planes_are_left_out_of_the_table(tmp_path: Path, pure: bool,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    if pure:
        monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")
    run = tmp_path / "run" / "h.xplane.pb"
    _with_empty_planes(run, 20_000)
    space_tail = new_space("")
    device = add_plane(space_tail, 7, "/device:GPU:0")  # a plane with lines after them
    dline = device.add_line(1, "stream", 0)
    device.add_event(dline, "kernel", 1010, 10)
    del space_tail.hostnames[:]
    named = new_space("")
    del named.hostnames[:]
    for i in range(1000):  # a device that recorded nothing, named 1,000 times: kept once
        add_plane(named, 100 + i, "/device:GPU:1")
    with open(run, "ab") as f:  # an XSpace's fields concatenate: more planes at the end
        f.write(named.SerializeToString() + space_tail.SerializeToString())
    table = next(iter(load(run.parent, use_cache=False).hosts.values()))
    assert [p.name for p in table.planes] == ["/host:CPU", "/device:GPU:1", "/device:GPU:0"]
    assert [table.planes[i].name for i in table.line_plane.tolist()] == [
        "/host:CPU", "/device:GPU:0"]
    assert table.names[int(table.name[-1])] == "kernel"


def test_many_distinct_names_are_read_whole(tmp_path: Path, capsys: Any) -> None:
    space = new_space("h")
    host = add_plane(space, 1, "/host:CPU")
    line = host.add_line(1, "main", 0)
    n = 50_000
    for step in range(5):
        host.add_event(line, "train", 1000 + step * n * 20, n * 20 - 10,
                       {"step_num": step, "_r": 1})
    for i in range(n):
        md = host.plane.event_metadata[i + 100]
        md.id, md.name = i + 100, f"op_{i:08d}"
        line.events.add(metadata_id=i + 100, offset_ps=(1000 + i * 100) * 1000,
                        duration_ps=50_000)
    run = tmp_path / "run"
    run.mkdir()
    (run / "h.xplane.pb").write_bytes(space.SerializeToString())
    code, out, err = run_cli(capsys, "report", str(run), "--json", "--no-cache")
    assert code == 0, err
    assert json.loads(out)["steps"]["count"] >= 1
    table = next(iter(load(run, use_cache=False).hosts.values()))
    assert len(set(table.names)) == n + 1
