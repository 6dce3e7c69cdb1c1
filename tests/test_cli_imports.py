"""What ``stepscope report`` imports: no framework, gRPC, pandas or web stack, ever; and on a
run whose answer is kept in the cache, neither NumPy nor the run nor the readers (the CLI's
fixed cost: the answer is printed from the cache, ``cli.common.Answers``). The modules are read
from ``sys.modules`` of a real ``stepscope report`` process at its end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import stepscope

# Run `stepscope report PATH` as the command does, then print the modules it imported.
_REPORT = """
import json, runpy, sys
sys.argv = ["stepscope", "report", *sys.argv[1:]]
try:
    runpy.run_module("stepscope", run_name="__main__")
except SystemExit as done:
    if done.code:
        raise
print("@@modules@@" + json.dumps(sorted(sys.modules)))
"""

# Never imported by `report`: frameworks, gRPC, pandas, the web stack, the capture session.
NEVER = ("torch", "tensorflow", "jax", "grpc", "pandas", "pyarrow", "fastapi", "uvicorn",
         "starlette", "stepscope.capture.session", "stepscope.web.app")
# Not imported when the run's answers are kept: NumPy, the run and its model, the readers and
# protobuf, the process pool, the other commands' modules (the web server, the capture).
CACHED_NEVER = ("numpy", "stepscope.run.run", "stepscope.run.loader", "stepscope.run.storage",
                "stepscope.model.cache", "stepscope.model.events", "stepscope.analysis.run_model",
                "google.protobuf", "stepscope.formats.run_reader",
                "stepscope.formats.xspace_to_tables", "concurrent.futures.process",
                "stepscope.web.http_server", "stepscope.capture", "socket", "logging")
# Not imported by `report --json` on a kept answer: what prints a table.
JSON_NEVER = ("rich", "stepscope.views")


def _report_modules(profile: Path, cache: Path, *options: str) -> set[str]:
    env = {**os.environ, "STEPSCOPE_CACHE_DIR": str(cache), "STEPSCOPE_NO_CACHE": "0"}
    done = subprocess.run([sys.executable, "-c", _REPORT, *options, str(profile)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("@@modules@@"))
    return set(json.loads(line[len("@@modules@@"):]))


def _imported(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in modules)]


@pytest.fixture
def tiny_profile(tmp_path: Path, quiet_options: stepscope.ProfilerOptions) -> Path:
    stepscope.start(str(tmp_path / "logs"), options=quiet_options)
    for i in range(3):
        with stepscope.Trace("train", step_num=i, _r=1):
            pass
    path = stepscope.stop()
    assert path is not None
    return Path(path)


def test_report_imports_no_framework_and_nothing_it_does_not_need(tiny_profile: Path,
                                                                   tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _report_modules(tiny_profile, cache)  # reads the file, fills the cache
    assert "stepscope.formats.xspace_to_tables" in first  # it did read the profile
    assert _imported(first, NEVER) == []
    cached = _report_modules(tiny_profile, cache)
    assert "stepscope.run.kept" in cached and "rich.table" in cached  # it printed the answer
    assert _imported(cached, NEVER + CACHED_NEVER) == []
    as_json = _report_modules(tiny_profile, cache, "--json")
    assert _imported(as_json, NEVER + CACHED_NEVER + JSON_NEVER) == []


def test_a_command_line_builds_the_parser_of_its_command_only() -> None:
    """Each command's module defines exactly the commands ``cli._COMMANDS`` names it for (the
    command line imports that module only), in the order the full help lists them."""
    import argparse
    import importlib

    from stepscope import cli

    for module in dict.fromkeys(cli._COMMANDS.values()):
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).add_parser(sub)
        assert sorted(sub.choices) == sorted(c for c, m in cli._COMMANDS.items() if m == module)
    full = cli.build_parser()
    commands = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    assert list(commands.choices) == list(cli._COMMANDS)
    for name in cli._COMMANDS:
        one = cli.build_parser(name)
        chosen = next(a for a in one._actions if isinstance(a, argparse._SubParsersAction))
        assert chosen.choices[name].format_help() == commands.choices[name].format_help()


# `stepscope serve` up to listening, its server's run replaced by printing the modules imported.
_SERVE = """
import json, sys
from stepscope.web import http_server
def listen(app, host, port):
    print("@@modules@@" + json.dumps(sorted(sys.modules)))
http_server.run_app = listen
http_server.serve(sys.argv[1], port=int(sys.argv[2]), quiet=True)
"""


def test_serve_imports_no_web_framework(tiny_profile: Path, tmp_path: Path) -> None:
    """The server's app is a plain ASGI app served by our own HTTP server: FastAPI and
    pydantic (most of the old start-up), Starlette, AnyIO and uvicorn (with its command line,
    click) are never imported, so a fresh server answers sooner."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "STEPSCOPE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", _SERVE, str(tiny_profile.parent), str(port)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("@@modules@@"))
    modules = set(json.loads(line[len("@@modules@@"):]))
    assert "stepscope.web.app" in modules  # it did make the app
    assert _imported(modules, ("fastapi", "pydantic", "starlette", "anyio", "uvicorn",
                               "click")) == []
