"""Build hooks: the web UI's bundle and the optional compiled fast paths (the rest is in
pyproject.toml).

Every wheel and sdist carries the built web UI (``src/stepscope/web/static``, built from
``frontend/`` with Node.js): where the bundle is missing it is built here, and a build that
would give a wheel or sdist without it stops with one line saying why. An sdist carries the
bundle, so installing from it needs no Node.js. Editable installs (``pip install -e``) are
left alone: ``make setup`` builds the bundle in a checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from setuptools.errors import SetupError

ROOT = Path(__file__).resolve().parent
FRONTEND = ROOT / "frontend"
STATIC = ROOT / "src" / "stepscope" / "web" / "static"
REQUIRED = ("index.html", "app.js")  # as stepscope.web.assets.REQUIRED


def _bundle_present() -> bool:
    return all((STATIC / name).is_file() for name in REQUIRED)


def ensure_ui_bundle() -> None:
    """Build the web UI into ``STATIC`` unless it is there; fail with one line if it cannot be."""
    if _bundle_present() and not os.environ.get("STEPSCOPE_REBUILD_UI"):
        return
    npm = shutil.which("npm")
    if not (FRONTEND / "package.json").is_file():
        raise SetupError("stepscope: the web UI bundle (src/stepscope/web/static) is missing "
                         "and there is no frontend/ to build it from; build from a checkout "
                         "or an sdist, which carry one or the other.")
    if npm is None or shutil.which("node") is None:
        raise SetupError("stepscope: the web UI bundle (src/stepscope/web/static) is missing "
                         "and Node.js is not on PATH to build it: install Node.js 18 or newer "
                         "(with npm), or build from an sdist, which carries the bundle.")
    print("stepscope: building the web UI (npm ci && npm run build in frontend/)", flush=True)
    try:
        if not (FRONTEND / "node_modules").is_dir():
            subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                           cwd=FRONTEND, check=True)
        subprocess.run([npm, "run", "build"], cwd=FRONTEND, check=True)
    except subprocess.CalledProcessError as err:
        raise SetupError(f"stepscope: building the web UI failed ({' '.join(err.cmd)} exited "
                         f"{err.returncode}; its output is above).") from err
    if not _bundle_present():
        raise SetupError("stepscope: the web UI build finished but src/stepscope/web/static "
                         f"lacks {', '.join(REQUIRED)}; see the build's output above.")


class BuildPyWithUI(build_py):
    """``build_py`` that makes sure the web UI bundle is there to be packaged."""

    def run(self) -> None:
        if not getattr(self, "editable_mode", False):
            ensure_ui_bundle()
            self.__dict__.pop("data_files", None)  # computed afresh: the bundle is new
        super().run()


class SdistWithUI(sdist):
    """``sdist`` that carries the built web UI (MANIFEST.in lists it)."""

    def run(self) -> None:
        ensure_ui_bundle()
        super().run()


setup(
    cmdclass={"build_py": BuildPyWithUI, "sdist": SdistWithUI},
    ext_modules=[
        # Optional: without a C compiler, stepscope falls back to its pure-Python capture path.
        Extension("stepscope.capture._fastpath", ["src/stepscope/capture/_fastpath.c",
                                                  "src/stepscope/capture/records.c",
                                                  "src/stepscope/capture/records_xplane.c"],
                  depends=["src/stepscope/capture/records.h",
                           "src/stepscope/capture/records_impl.h",
                           "src/stepscope/formats/protobuf_wire.h"], optional=True),
        # The Python tracer's profile hook in C; python_tracer.py has the pure-Python twin.
        Extension("stepscope.capture._pyhook", ["src/stepscope/capture/_pyhook.c"],
                  depends=["src/stepscope/capture/records.h"], optional=True),
        # XSpace bytes straight into columns; formats/xspace_columns.py has the protobuf twin.
        # It walks a big file's two halves on two threads (pthreads).
        Extension("stepscope.formats._xspace_decode", ["src/stepscope/formats/_xspace_decode.c"],
                  extra_compile_args=["-pthread"], extra_link_args=["-pthread"],
                  optional=True),
        # Columns straight into XEvent bytes; formats/xplane_encoder.py has the NumPy twin.
        Extension("stepscope.formats._xplane_encode", ["src/stepscope/formats/_xplane_encode.c"],
                  depends=["src/stepscope/formats/protobuf_wire.h"], optional=True),
        # The trace viewer's row layout; trace_index._overlapping_rows is the Python twin.
        Extension("stepscope.analysis.trace._trace_layout",
                  ["src/stepscope/analysis/trace/_trace_layout.c"], optional=True),
        # Interval nesting (parents, self times) in one walk; intervals.py has the NumPy twin.
        Extension("stepscope.analysis.run_model._intervals",
                  ["src/stepscope/analysis/run_model/_intervals.c"], optional=True),
    ],
)
