"""`stepscope profile -- python PROGRAM`: real programs (examples/) on the CPU builds of PyTorch,
JAX and Keras, and plain Python; exit codes, output, Ctrl-C and step limits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _need(module: str) -> None:
    """Skip without ``module`` (fail under STEPSCOPE_REQUIRE_FRAMEWORKS, as `make test-newest`)."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        if os.environ.get("STEPSCOPE_REQUIRE_FRAMEWORKS"):
            pytest.fail(f"{module} is required (STEPSCOPE_REQUIRE_FRAMEWORKS)")
        pytest.skip(f"{module} is not installed")


def profile(logdir: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``python -m stepscope profile --logdir LOGDIR ARGS`` to the end."""
    return subprocess.run([sys.executable, "-m", "stepscope", "profile", "--logdir",
                           str(logdir), *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600, check=False)


def report(logdir: Path) -> Any:
    """The overview of the newest run of ``logdir`` (`stepscope report --json`)."""
    done = subprocess.run([sys.executable, "-m", "stepscope", "report", str(logdir), "--json"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_plain_python_exit_code_output_and_steps(tmp_path: Path) -> None:
    done = profile(tmp_path, "--", "python", str(EXAMPLES / "plain_python.py"), "--steps",
                   "12", "--exit-code", "3")
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith("total "), "the program's output is its own"
    assert done.stdout.count("\n") == 1
    assert "profile written to" in done.stderr and "Run " in done.stderr  # the report
    steps = report(tmp_path)["steps"]
    assert (steps["found_by"], steps["marker"]) == ("root", "train")
    assert steps["count"] == 12  # all 12 marked: stepscope's own captures keep whole steps


def test_python_m_stepscope_profile_runs_modules_and_code(tmp_path: Path) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "__main__.py").write_text(textwrap.dedent("""
        import sys
        print("argv", sys.argv[1:], "main", __name__)
        raise SystemExit("bad input")
    """))
    done = profile(tmp_path / "logs", "--no-report", "--", "python", "-m", "mypkg", "a", "b",
                   cwd=tmp_path)
    assert done.stdout.strip() == "argv ['a', 'b'] main __main__"
    assert done.returncode == 1 and "bad input" in done.stderr
    assert list((tmp_path / "logs").rglob("*.xplane.pb")), "the profile is written anyway"
    code = profile(tmp_path / "logs2", "--no-report", "--", "python", "-c",
                   "import sys; print(sys.argv); sys.exit(4)")
    assert (code.returncode, code.stdout.strip()) == (4, "['-c']")


def test_uncaught_exception_gives_1_a_traceback_and_a_profile(tmp_path: Path) -> None:
    script = tmp_path / "boom.py"
    script.write_text("def f():\n    raise ValueError('boom')\nf()\n")
    done = profile(tmp_path / "logs", "--no-report", "--", "python", str(script))
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "ValueError: boom" in done.stderr
    assert list((tmp_path / "logs").rglob("*.xplane.pb"))


@pytest.mark.parametrize("command", [["ls", "-l"], [], ["python"], ["python", "-X", "dev",
                                                                    "x.py"],
                                     ["python", "no_such_script.py"]])
def test_commands_it_cannot_run_give_one_line(tmp_path: Path, command: list[str]) -> None:
    done = profile(tmp_path, "--", *command)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("stepscope: error: ")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "plugins").exists(), "nothing is recorded for a bad command"


def test_ctrl_c_stops_the_program_and_keeps_the_profile(tmp_path: Path) -> None:
    script = tmp_path / "forever.py"
    script.write_text(textwrap.dedent("""
        import time
        from stepscope import Trace
        i = 0
        while True:
            with Trace("train", step_num=i, _r=1):
                with Trace("work"):
                    time.sleep(0.01)
            if i == 3:
                print("ready", flush=True)
            i += 1
    """))
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", "profile", "--logdir",
                             str(tmp_path / "logs"), "--", "python", str(script)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "interrupted; writing the profile" in err
    assert report(tmp_path / "logs")["steps"]["count"] >= 4


def test_steps_limit_stops_recording_and_the_program_runs_on(tmp_path: Path) -> None:
    _need("torch")
    done = profile(tmp_path, "--steps", "5", "--", "python",
                   str(EXAMPLES / "pytorch_train.py"), "--steps", "12")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("final loss"), "the program ran to its end"
    steps = report(tmp_path)["steps"]
    # Each optimizer.step() ends a step; 5 of them, none trimmed (XProf trims above 5).
    assert (steps["count"], steps["found_by"], steps["marker"]) == (5, "root", "train")


def test_pytorch_example_optimizer_steps_and_ops(tmp_path: Path) -> None:
    _need("torch")
    done = profile(tmp_path, "--", "python", str(EXAMPLES / "pytorch_train.py"), "--steps",
                   "8")
    assert done.returncode == 0, done.stderr
    data = report(tmp_path)
    assert data["steps"]["count"] == 8  # the 8 optimizer steps, all whole
    names = {op["name"] for op in data["top_ops"]}
    assert any(name.startswith("aten::") for name in names), names  # the torch bridge ran


def test_jax_example_step_trace_annotation(tmp_path: Path) -> None:
    _need("jax")
    done = profile(tmp_path, "--", "python", str(EXAMPLES / "jax_train.py"), "--steps", "7")
    assert done.returncode == 0, done.stderr
    steps = report(tmp_path)["steps"]
    assert (steps["count"], steps["marker"]) == (7, "train")


def test_keras_example_batches(tmp_path: Path) -> None:
    _need("keras")
    _need("tensorflow")
    done = profile(tmp_path, "--", "python", str(EXAMPLES / "keras_train.py"), "--epochs",
                   "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("final loss")
    steps = report(tmp_path)["steps"]
    assert (steps["count"], steps["marker"]) == (8, "train")  # the 8 batches, all whole


def test_duration_stops_recording(tmp_path: Path) -> None:
    script = tmp_path / "slow.py"
    script.write_text(textwrap.dedent("""
        import time
        from stepscope import Trace
        for i in range(60):
            with Trace("train", step_num=i, _r=1):
                with Trace("work"):
                    time.sleep(0.05)
        print("done")
    """))
    done = profile(tmp_path / "logs", "--duration", "0.5", "--", "python", str(script))
    assert done.returncode == 0 and done.stdout.strip() == "done"
    steps = report(tmp_path / "logs")["steps"]
    # 60 steps of at least 50 ms ran; recording stopped after half a second of them.
    assert 1 <= steps["count"] < 55, steps


SLOW_STEP = textwrap.dedent("""
    import time
    import stepscope

    for i in range(60):
        with stepscope.flight_recorder.step(i):
            time.sleep(0.05 if i == 45 else 0.002)
    print("done")
""")


def test_flight_recorder_saves_the_slow_step_and_nothing_else(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(SLOW_STEP)
    done = profile(tmp_path / "logs", "--flight-recorder", "--flight-steps", "20",
                   "--slow-factor", "5", "--", "python", str(script))
    assert done.returncode == 0, done.stderr
    assert "done" in done.stdout and "saved slow_step window" in done.stderr, done.stderr
    runs = sorted((tmp_path / "logs" / "plugins" / "profile").iterdir())
    assert len(runs) == 1 and runs[0].name.endswith("flight-slow_step")


def test_flight_recorder_keeps_the_window_of_an_exception(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text(SLOW_STEP.replace('print("done")', 'raise RuntimeError("boom")'))
    done = profile(tmp_path / "logs", "--flight-recorder", "--slow-ms", "10000", "--",
                   "python", str(script))
    assert done.returncode == 1 and "RuntimeError: boom" in done.stderr
    assert "saved exception window" in done.stderr, done.stderr


def test_commands_keep_numpy_off_huge_pages_but_not_the_profiled_program(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """stepscope's own commands leave NumPy's large arrays on small pages (a huge page costs
    more to fault in where memory is lent lazily), through NumPy's switch in this process and
    the environment its children inherit; ``profile`` runs the user's program in this process
    and leaves its NumPy as the user has it."""
    import numpy as np

    from stepscope.cli import main

    script = tmp_path / "show.py"
    script.write_text("import os\nprint(os.environ.get('NUMPY_MADVISE_HUGEPAGE', 'unset'))\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    done = subprocess.run([sys.executable, "-m", "stepscope", "profile", "--logdir",
                           str(tmp_path / "logs"), "--", "python", str(script)],
                          capture_output=True, text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "unset"
    # Set then deleted: the variable as it was comes back after the test, whatever main sets.
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "")
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE")
    was = np._core.multiarray._get_madvise_hugepage()
    try:
        np._core.multiarray._set_madvise_hugepage(True)
        assert main(["runs", str(tmp_path / "logs")]) == 0
        assert os.environ["NUMPY_MADVISE_HUGEPAGE"] == "0"
        assert np._core.multiarray._get_madvise_hugepage() is False
        monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")  # the user's choice stands
        np._core.multiarray._set_madvise_hugepage(True)
        assert main(["runs", str(tmp_path / "logs")]) == 0
        assert np._core.multiarray._get_madvise_hugepage() is True
    finally:
        np._core.multiarray._set_madvise_hugepage(was)
