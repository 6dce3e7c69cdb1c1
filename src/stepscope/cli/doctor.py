"""``stepscope doctor``: what this machine gives the profiler, and why not where it does not."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import shutil
import sys
from dataclasses import asdict, dataclass
from typing import Any

# (what a user calls it, distributions that provide it): versions come from the installed
# metadata, so no framework is imported (TensorFlow alone takes seconds).
FRAMEWORKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("PyTorch", ("torch",)),
    ("JAX", ("jax",)),
    ("jaxlib", ("jaxlib",)),
    ("TensorFlow", ("tensorflow", "tensorflow-cpu", "tf-nightly")),
    ("Keras", ("keras",)),
    ("tf-keras (Keras 2)", ("tf-keras",)),
    ("XProf", ("xprof",)),
    ("TensorBoard", ("tensorboard",)),
    ("cupti-python (CUDA bridge)", ("cupti-python",)),
)
# Optional extras: (package to install, module it provides, what it gives).
EXTRAS: tuple[tuple[str, str, str], ...] = (
    ("stepscope[s3]", "s3fs", "logdirs on s3://"),
    ("stepscope[gcs]", "gcsfs", "logdirs on gs://"),
    ("stepscope[azure]", "adlfs", "logdirs on az://"),
    ("stepscope[ray]", "ray", "--engine ray"),
    ("stepscope[pandas]", "pandas", "results as DataFrames"),
    ("stepscope[gpu]", "pynvml", "GPU counters (NVML)"),
)
# The compiled fast paths and their pure-Python twins.
FAST_PATHS: tuple[tuple[str, str], ...] = (
    ("stepscope.capture._fastpath", "Trace and the event recorder"),
    ("stepscope.capture._pyhook", "the Python tracer's hook"),
    ("stepscope.formats._xspace_decode", "XSpace decoding"),
    ("stepscope.formats._xplane_encode", "XSpace encoding"),
    ("stepscope.analysis.trace._trace_layout", "the trace viewer's row layout"),
    ("stepscope.analysis.run_model._intervals", "events' nesting and self times"),
)


@dataclass(frozen=True)
class Check:
    """One line of the diagnosis."""

    section: str
    name: str
    ok: bool
    detail: str


def add_parser(sub: Any) -> None:
    """Register ``doctor`` on ``sub`` (from ``add_subparsers``)."""
    doc = sub.add_parser("doctor", help="what this machine gives the profiler",
                         description="Frameworks and their versions, the compiled fast paths, "
                         "GPU visibility (NVML, CUPTI), the web UI bundle and the optional "
                         "extras, each with why not where it is missing. Imports no framework.")
    doc.add_argument("--json", action="store_true", help="print the checks as JSON")
    doc.set_defaults(func=run)


def _version(dists: tuple[str, ...]) -> str | None:
    import importlib.metadata  # here: every other command loads this module, not its checks

    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def checks() -> list[Check]:
    """Every check, in the order they are shown."""
    from stepscope.version import __version__
    from stepscope.web.assets import STATIC, missing_bundle_message

    out = [Check("stepscope", "version", True,
                 f"{__version__} on Python {platform.python_version()} ({sys.executable})")]
    for name, dists in FRAMEWORKS:
        version = _version(dists)
        out.append(Check("frameworks", name, version is not None,
                         version or "not installed (the bridge is used when it is)"))
    pure = bool(os.environ.get("STEPSCOPE_PURE_PYTHON"))
    for module, what in FAST_PATHS:
        try:
            importlib.import_module(module)
            loaded, detail = True, f"compiled ({what})"
        except ImportError as err:
            loaded, detail = False, (f"not built ({err}); the pure-Python twin does {what}: "
                                     "install with a C compiler to get it")
        if loaded and pure and module != "stepscope.capture._pyhook":
            loaded, detail = False, f"built, but STEPSCOPE_PURE_PYTHON is set ({what})"
        out.append(Check("fast paths", module.rsplit(".", 1)[1], loaded, detail))
    out += _gpu_checks()
    bundle = missing_bundle_message()
    out.append(Check("web UI", "bundle", bundle is None,
                     str(STATIC) if bundle is None else bundle))
    for package, module, what in EXTRAS:
        found = importlib.util.find_spec(module) is not None
        out.append(Check("extras", package, found,
                         what if found else f"not installed: pip install '{package}' for {what}"))
    return out


def _gpu_checks() -> list[Check]:
    """NVML (GPU counters) and CUPTI (device tracing) visibility, with the reason if not."""
    out = []
    smi = shutil.which("nvidia-smi")
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        out.append(Check("GPU", "NVML", False, "nvidia-ml-py is not installed: pip install "
                         "'stepscope[gpu]' for GPU counters" + (
                             "" if smi else "; no nvidia-smi either (no NVIDIA driver?)")))
    else:
        try:
            pynvml.nvmlInit()
            count = int(pynvml.nvmlDeviceGetCount())
            names = [_text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
                     for i in range(count)]
            driver = _text(pynvml.nvmlSystemGetDriverVersion())
            out.append(Check("GPU", "NVML", count > 0,
                             f"{count} GPU(s): {', '.join(names) or 'none'}; driver {driver}"))
        except Exception as err:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            out.append(Check("GPU", "NVML", False, f"NVML cannot start ({err}): no NVIDIA "
                             "driver, or no GPU visible to this process"))
    import ctypes.util
    import importlib.metadata

    cupti = ctypes.util.find_library("cupti")
    if cupti is None:
        for dist in ("nvidia-cuda-cupti-cu12", "nvidia-cuda-cupti-cu13", "nvidia-cuda-cupti"):
            try:
                files = importlib.metadata.files(dist) or []
            except importlib.metadata.PackageNotFoundError:
                continue
            found = [f for f in files if "libcupti" in f.name]
            if found:
                cupti = str(found[0].locate())
                break
    out.append(Check("GPU", "CUPTI", cupti is not None,
                     cupti or "libcupti not found (on the library path or in an nvidia-cuda-"
                     "cupti package): device tracing comes from the frameworks' own GPU builds, "
                     "or not at all on a CPU-only machine"))
    return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def run(args: argparse.Namespace) -> int:
    """Print the diagnosis; 0 always (a missing piece is information, not a failure)."""
    found = checks()
    if args.json:
        print(json.dumps([asdict(c) for c in found], indent=2))
        return 0
    section = ""
    for check in found:
        if check.section != section:
            section = check.section
            print(f"{section}:")
        mark = "ok " if check.ok else "-- "
        print(f"  {mark} {check.name}: {check.detail}")
    return 0
