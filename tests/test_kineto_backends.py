"""Kineto traces of devices that are not CUDA read as device work.

No shared fixture holds an MTIA, XPU or PrivateUse1 trace, so each test builds one from a real
one: TraceLens's H100 BERT trace (Kineto JSON from PyTorch on an NVIDIA H100) with its
categories renamed to what Kineto writes for the other backend (``kernel`` → MTIA's
``mtia_ccp_events``; ``cuda_runtime``/``cuda_driver`` → ``mtia_runtime``, ``xpu_runtime`` or
``privateuse1_runtime``/``privateuse1_driver``) and, for MTIA, its ``GPU n`` process labels to
``MTIA n``. Everything else (names, times, correlation ids, flows) is the file's own, so the
renamed trace must give the original's device figures exactly."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import stepscope
from stepscope.analysis.run_model.kernel_stats import kernel_stats
from stepscope.formats import run_reader

from conftest import FIXTURES

H100_BERT = FIXTURES / "TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"

BACKENDS = {
    "mtia": {"kernel": "mtia_ccp_events", "cuda_runtime": "mtia_runtime",
             "cuda_driver": "mtia_runtime"},
    "xpu": {"cuda_runtime": "xpu_runtime", "cuda_driver": "xpu_runtime"},
    "privateuse1": {"cuda_runtime": "privateuse1_runtime",
                    "cuda_driver": "privateuse1_driver"},
}

pytestmark = pytest.mark.usefixtures("cache_home")


def _renamed(backend: str, tmp_path: Path) -> Path:
    doc = json.loads(gzip.decompress(H100_BERT.read_bytes()))
    cats = BACKENDS[backend]
    renamed = 0
    for e in doc["traceEvents"]:
        if e.get("cat") in cats:
            e["cat"] = cats[e["cat"]]
            renamed += 1
        args = e.get("args") or {}
        if backend == "mtia" and e.get("ph") == "M" and str(args.get("labels", "")) \
                .startswith("GPU"):
            args["labels"] = args["labels"].replace("GPU", "MTIA")
    assert renamed >= 60  # the trace's 60 kernels (and its runtime calls) were renamed
    out = tmp_path / f"{backend}.pt.trace.json.gz"
    out.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out


def _device_figures(path: Path) -> dict[str, Any]:
    overview = stepscope.open(path).model.overview().to_dict()
    stats = kernel_stats(run_reader.load(path))
    return {
        "device_type": overview["environment"]["device_type"],
        "device_count": overview["environment"]["device_count"],
        "device_compute": overview["breakdown"]["device_compute"],
        "kernels": sorted((r.kernel, r.op, r.occurrences, r.total_us) for r in stats.rows),
    }


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_backend_device_work_equals_the_cuda_original(backend: str, tmp_path: Path) -> None:
    original = _device_figures(H100_BERT)
    assert original["device_type"] == "GPU" and original["device_count"] == 1
    assert original["device_compute"] > 5.0 and len(original["kernels"]) > 10
    assert _device_figures(_renamed(backend, tmp_path)) == original


def test_mtia_trace_is_not_cpu_only(tmp_path: Path) -> None:
    """What an MTIA trace read as before: CPU only, no kernels; now its device compute."""
    figures = _device_figures(_renamed("mtia", tmp_path))
    assert figures["device_type"] != "CPU" and figures["device_count"] == 1
    assert sum(k[2] for k in figures["kernels"]) == 60
    assert figures["device_compute"] == pytest.approx(6.940557789519204, rel=1e-9)
