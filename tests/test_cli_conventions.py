"""Command-line conventions: `serve PATH`, `runs`, `--run NAME`, "did you mean", help with
defaults and no markup, and `doctor`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stepscope.cli import build_parser, main

from workloads import make_stepscope_run


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stepscope", *args], capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    logdir = tmp_path_factory.mktemp("logs")
    first = make_stepscope_run(logdir, steps=8)
    second = first.parent / "2999_01_01_00_00_00"  # the newest by name
    make_stepscope_run(tmp_path_factory.mktemp("other"), steps=12).rename(second)
    return logdir, [first.name, second.name]


def test_runs_lists_runs_oldest_first(two_runs: tuple[Path, list[str]],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    logdir, names = two_runs
    assert main(["runs", str(logdir), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["runs"]
    assert [r["name"] for r in listed] == names
    assert all(r["files"] == 1 and r["bytes"] > 0 for r in listed)
    assert main(["runs", str(logdir)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("(newest)")


def test_run_picks_a_run_and_a_typo_gets_a_suggestion(two_runs: tuple[Path, list[str]],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    logdir, names = two_runs
    assert main(["report", str(logdir), "--json"]) == 0
    newest = json.loads(capsys.readouterr().out)
    assert main(["report", str(logdir), "--json", "--run", names[0]]) == 0
    first = json.loads(capsys.readouterr().out)
    assert (newest["run"], first["run"]) == (names[1], names[0])
    assert (newest["steps"]["count"], first["steps"]["count"]) == (12, 8)
    typo = names[0][:-1] + ("8" if names[0].endswith("9") else "9")  # never the name itself
    assert main(["report", str(logdir), "--run", typo]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stepscope: error: No run") and f"did you mean '{names[0]}'" in err


def test_did_you_mean_on_a_mistyped_command() -> None:
    done = _cli("sevre", "logs")
    assert done.returncode == 2
    assert "did you mean 'serve'?" in done.stderr


def test_help_shows_defaults_and_no_markup() -> None:
    parser = build_parser()
    top = " ".join(parser.format_help().split())  # as wrapped at any terminal width
    assert "``" not in top and "stepscope profile -- python train.py" in top
    sub = next(a for a in parser._actions if hasattr(a, "choices") and a.choices)
    demo = " ".join(sub.choices["demo"].format_help().split())
    assert "(default demo-logs)" in demo and "(default 30)" in demo
    assert "Train a small NumPy model" in demo
    serve = sub.choices["serve"].format_help()
    assert "PATH" in serve and "--logdir" in serve
    profile = " ".join(sub.choices["profile"].format_help().split())
    assert "1 or 2" in profile and "(default 1)" in profile


def test_serve_takes_a_positional_path_or_logdir_but_not_both(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", str(tmp_path)])
    assert (args.path, args.logdir) == (str(tmp_path), None)
    assert main(["serve", str(tmp_path / "a"), "--logdir", str(tmp_path / "b")]) == 2


def test_doctor_says_what_is_there(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--json"]) == 0
    checks = json.loads(capsys.readouterr().out)
    sections = {c["section"] for c in checks}
    assert sections >= {"stepscope", "frameworks", "fast paths", "GPU", "web UI", "extras"}
    gpu = [c for c in checks if c["section"] == "GPU"]
    assert all(c["ok"] or c["detail"] for c in gpu)  # a reason wherever it is missing
    assert main(["doctor"]) == 0
    assert "fast paths:" in capsys.readouterr().out
