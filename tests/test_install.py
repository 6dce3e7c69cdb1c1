"""Installable like real software: a clean clone's sdist carries the web UI, a wheel built from
that sdist with no Node.js on PATH installs into a fresh venv, and that install serves the UI
(checked in a real Chromium); a clean clone without Node.js refuses to build a wheel without
the UI, in one line."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from browser import Server, free_port, launch, watch

ROOT = Path(__file__).resolve().parents[1]
NODE_TOOLS = {"node", "nodejs", "npm", "npx", "corepack"}

pytestmark = pytest.mark.slow


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False,
                          **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done  # type: ignore[no-any-return]


def _no_node_path(where: Path) -> str:
    """A PATH with every program of this one but Node.js' (links in ``where``)."""
    where.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or not Path(folder).is_dir():
            continue
        for tool in Path(folder).iterdir():
            link = where / tool.name
            if tool.name not in NODE_TOOLS and not link.exists() and not link.is_symlink():
                link.symlink_to(tool)
    return str(where)


def _clean_clone(tmp: Path) -> Path:
    """A git clone of this checkout's HEAD: no built UI, no node_modules, no .so."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    clone = tmp / "clone"
    _run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)])
    assert not (clone / "src" / "stepscope" / "web" / "static").exists()
    return clone


def _build_isolation() -> list[str]:
    """Build in this environment where its setuptools is new enough (faster, no download)."""
    try:
        major = int(importlib.metadata.version("setuptools").split(".")[0])
        importlib.metadata.version("wheel")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return []
    return ["--no-build-isolation"] if major >= 77 else []


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """(the fresh venv's bin folder, a PATH without Node.js) of a wheel built from an sdist."""
    if shutil.which("npm") is None:
        pytest.skip("the sdist's UI is built with Node.js, which this machine lacks")
    try:
        importlib.metadata.version("build")  # (a checkout's build/ folder is not the package)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the build package is not installed (pip install 'stepscope[test]')")
    tmp = tmp_path_factory.mktemp("install")
    clone = _clean_clone(tmp)
    dist = tmp / "dist"
    # The sdist, from the clean clone: setup.py builds the UI with Node.js first.
    isolation = ["--no-isolation"] if _build_isolation() else []
    _run([sys.executable, "-m", "build", "--sdist", *isolation, "-o", str(dist), str(clone)],
         cwd=tmp)
    (sdist,) = dist.glob("stepscope-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    assert any(n.endswith("stepscope/web/static/app.js") for n in names), names
    assert not any("node_modules" in n for n in names)
    # The wheel, from the sdist, with no Node.js to be found.
    path = _no_node_path(tmp / "bin-without-node")
    env = {**os.environ, "PATH": path}
    env.pop("PYTHONPATH", None)  # pip would take a checkout's sources for an install
    assert shutil.which("node", path=path) is None
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", *_build_isolation(), "-w",
          str(dist), str(sdist)], env=env)
    (wheel,) = dist.glob("stepscope-*.whl")
    # A fresh venv (none of this environment's packages) with the wheel and the core only.
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], env=env)
    yield venv / "bin", f"{venv / 'bin'}{os.pathsep}{path}"


def test_wheel_without_node_serves_the_ui(installed: tuple[Path, str], tmp_path: Path) -> None:
    bin_dir, path = installed
    env = {**os.environ, "PATH": path, "STEPSCOPE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)  # the installed package, not this checkout's sources
    assert shutil.which("node", path=path) is None
    stepscope = str(bin_dir / "stepscope")
    where = _run([str(bin_dir / "python"), "-c", "import stepscope; print(stepscope.__file__)"],
                 env=env, cwd=tmp_path).stdout
    assert where.startswith(str(bin_dir.parent)), where
    doctor = json.loads(_run([stepscope, "doctor", "--json"], env=env).stdout)
    assert {c["name"]: c["ok"] for c in doctor if c["section"] == "web UI"} == {"bundle": True}
    assert any(c["section"] == "fast paths" and c["ok"] for c in doctor)
    logdir = tmp_path / "logs"
    _run([stepscope, "demo", "--no-serve", "--steps", "8", "--logdir", str(logdir)], env=env)
    port = free_port()
    proc = subprocess.Popen([stepscope, "serve", str(logdir), "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    server = Server(port)
    try:
        for _ in range(600):
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read() if proc.stderr else "")
            try:
                if server.get("runs")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        with launch() as browser, watch(browser, server) as w:
            w.page.goto(server.base)
            w.page.wait_for_selector("#overview-page")
            assert int(w.page.get_attribute("#step-count", "data-value") or 0) >= 1
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "no web UI bundle" not in err


def test_clean_clone_without_node_refuses_a_wheel_without_ui(tmp_path: Path) -> None:
    clone = _clean_clone(tmp_path)
    path = _no_node_path(tmp_path / "bin-without-node")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           *_build_isolation(), "-w", str(tmp_path / "dist"), str(clone)],
                          capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "PATH": path})
    assert done.returncode != 0
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines()
             if "stepscope: the web UI bundle" in line]
    assert lines and "Node.js is not on PATH" in lines[0], done.stderr[-3000:]
    assert not list((tmp_path / "dist").glob("*.whl"))


def test_missing_bundle_is_said_plainly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stepscope.web import assets

    monkeypatch.setattr(assets, "STATIC", tmp_path / "static")
    message = assets.missing_bundle_message()
    assert message is not None and "no web UI bundle" in message and "wheel" in message
    status, _, body = assets.static_reply("index.html")
    assert status == 200 and b"no web UI bundle" in body
    (tmp_path / "static").mkdir()
    for name in assets.REQUIRED:
        (tmp_path / "static" / name).write_text("x")
    assert assets.missing_bundle_message() is None
