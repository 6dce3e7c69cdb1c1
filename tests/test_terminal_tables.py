"""What the terminal shows (issue 30): tables fit 100 columns with every number whole, no type
column that repeats the op's name, kernel names shortened (whole in --json), a sentence for
an empty table, bytes in KiB/MiB/GiB, and how steps were found in words."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import stepscope.cli.common
from stepscope.cli import main
from stepscope.views.tables import short_name
from stepscope.views.units import count_text, size_text

from conftest import FIXTURES

WIDTH = 100
QWEN = FIXTURES / "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
ALEXNET = (FIXTURES / "HolisticTraceAnalysis/tests/data/critical_path/alexnet/"
           "benchmark_result_2869224_1695835535_trace.json.gz")
TF_GPU = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
TPU = FIXTURES / "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb"
MI300 = FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb"
DLRM = FIXTURES / "param/et_replay/tests/inputs/dlrm_kineto"

pytestmark = pytest.mark.usefixtures("cache_home")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built-in NumPy demo, recorded here (the README's first recipe)."""
    logdir = tmp_path_factory.mktemp("demo")
    done = subprocess.run([sys.executable, "-m", "stepscope.cli", "demo", "--logdir",
                           str(logdir), "--steps", "14", "--no-serve"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return logdir


@pytest.fixture
def screen(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """What the commands print, on a 100-column terminal."""
    out = io.StringIO()
    monkeypatch.setattr(stepscope.cli.common, "console", lambda stderr=False: Console(
        file=io.StringIO() if stderr else out, width=WIDTH, highlight=False,
        color_system=None))
    yield out


def _shown(screen: io.StringIO, *args: str) -> str:
    screen.seek(0)
    screen.truncate()
    assert main(list(args)) == 0
    text = screen.getvalue()
    assert max(map(len, text.splitlines())) <= WIDTH
    return text


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _header(text: str, first: str) -> str:
    """The header line of the table whose first column is ``first``."""
    return next(line for line in text.splitlines() if line.startswith(first + " "))


def test_ops_numbers_whole_and_a_type_only_where_it_says_more(
        screen: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _json(capsys, "ops", str(QWEN))["ops"]
    # PyTorch's op types are its op names; its CUDA calls' type is their Kineto category (the
    # one type the column shows: the names are not said twice).
    calls = [r for r in rows[:20] if r["type"] != r["name"]]
    assert calls and all(r["type"] == "cuda_runtime" for r in calls)
    assert all(r["type"] == r["name"] for r in rows[:20] if r not in calls)
    text = _shown(screen, "ops", str(QWEN), "--limit", "20")
    assert "type" in _header(text, "where").split()
    for r in rows[:20]:
        line = next(line for line in text.splitlines() if line.split()[1:2] == [r["name"]])
        assert line.split().count(r["name"]) == 1
        assert (r["type"] in line.split()) if r in calls else "cuda_runtime" not in line
        for figure in (f"{r['total_ms']:.3f}", f"{r['self_ms']:.3f}", f"{r['avg_ms']:.4f}",
                       f"{r['self_percent']:.1f}", f"{r['occurrences']:,}"):
            assert figure in line.split(), (figure, line)
    assert "…" not in text.split("Framework op stats")[1].split("… ")[0]


def test_report_keeps_a_type_only_where_it_says_more(
        screen: io.StringIO, demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    top = _json(capsys, "report", str(demo))["top_ops"]
    text = _shown(screen, "report", str(demo))
    assert "type" in _header(text, "#").split()  # the tf.data-style stages are "Dataset"s
    for op in top:
        line = next(line for line in text.splitlines()
                    if re.match(rf"\s*\d+\s+\S+\s+{re.escape(op['name'])}\s", line))
        cells = line.split()
        # After the name: its type where it differs, else straight the count.
        assert cells[3] == (op["type"] if op["type"] != op["name"]
                            else f"{op['occurrences']:,}"), line
        assert f"{op['self_ms']:.3f}" in cells and f"{op['cumulative_self_percent']:.1f}" in cells


def test_kernel_names_shortened_numbers_whole_full_names_in_json(
        screen: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    for path in (QWEN, ALEXNET, TF_GPU):
        rows = _json(capsys, "kernels", str(path))["rows"][:8]
        text = _shown(screen, "kernels", str(path), "--limit", "8")
        templated = [r for r in rows if "<" in r["kernel"]]
        lines = text.splitlines()
        body = lines[next(i for i, line in enumerate(lines) if line.startswith("───")) + 1:]
        for r, line in zip(rows, body[0::3], strict=False):  # name, its op, launch shape
            name = short_name(r["kernel"])
            assert len(name) <= 60 and "<" not in name.replace("<…>", "")
            assert line.startswith(name + " "), (name, line)
            for figure in (f"{r['total_us']:.1f}", f"{r['avg_us']:.1f}", f"{r['percent']:.1f}",
                           f"{r['occurrences']:,}"):
                assert figure in line.split(), (figure, line)
            if r["shared_memory_bytes"] is not None:
                assert f"{size_text(r['shared_memory_bytes'])} shared" in text
        for r in templated:  # the JSON keeps the whole name
            assert r["kernel"] not in text and "<…>" in short_name(r["kernel"])
    assert templated, "the TF GPU fixture has templated Eigen kernels"


def test_short_name_of_real_kernel_names() -> None:
    assert short_name("void at::native::vectorized_elementwise_kernel<4, "
                      "at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, "
                      "at::native::FillFunctor<float>, at::detail::Array<char*, 1>)") \
        == "at::native::vectorized_elementwise_kernel<…>"
    assert short_name("void (anonymous namespace)::softmax_warp_forward<float, float, float, "
                      "8, false, false>(float*, float const*, int, int, int, bool const*, "
                      "int, bool)") == "(anonymous namespace)::softmax_warp_forward<…>"
    assert short_name("ampere_sgemm_32x32_sliced1x4_tn") == "ampere_sgemm_32x32_sliced1x4_tn"
    assert short_name("operator<bad") == "operator<bad"  # unbalanced: left as it is
    long = "x" * 200
    assert len(short_name(long)) == 60 and "…" in short_name(long)


def test_empty_tables_are_a_sentence(screen: io.StringIO, demo: Path) -> None:
    text = _shown(screen, "kernels", str(demo))
    assert text.startswith("No GPU kernels in this profile") and "─" not in text
    assert "count" not in text


def test_wide_tables_fit_with_numbers_whole(
        screen: io.StringIO, demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The pod viewer's per-host table: ten columns of figures and a host name.
    pod = _json(capsys, "pod", str(DLRM))
    text = _shown(screen, "pod", str(DLRM))
    for name, t in pod["totals"].items():
        line = next(line for line in text.splitlines() if line.startswith(name + " "))
        assert f"{t['total_ms'] / max(t['steps'], 1):.3f}" in line.split()
    # The op profile on several programs: program and category under the op's name.
    xla = _json(capsys, "xla", str(TPU), "--top", "5")
    text = _shown(screen, "xla", str(TPU), "--top", "5").split("Top ops")[1]
    for o in xla["ops"][:5]:
        line = next(line for line in text.splitlines() if line.startswith(o["name"] + " "))
        assert f"{o['self_ms']:,.3f}" in line.split() and f"{o['occurrences']:,}" in line
        assert f"  {o['module']} · {o['category']}" in text
    # The memory profile's per-allocator summary.
    memory = _json(capsys, "memory", str(demo))
    text = _shown(screen, "memory", str(demo))
    for a in memory["allocators"]:
        line = next(line for line in text.splitlines() if line.startswith(a["name"] + " "))
        assert size_text(a["peak_bytes_in_use"]) in line
        assert f"{a['num_allocations']:,}" in line.split()


def test_bytes_are_kib_mib_gib(screen: io.StringIO, demo: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert size_text(443_392) == "433 KiB"  # the example: the UI writes it the same
    assert size_text(512) == "512 B" and size_text(None) == "-"
    assert size_text(1_158_151_520) == "1.08 GiB" and size_text(-65_536) == "-64.0 KiB"
    assert size_text(16_384) == "16.0 KiB" and size_text(1 << 20) == "1.00 MiB"
    assert count_text(48_580_000.0) == "48,580,000" and count_text(12.345) == "12.3"
    text = _shown(screen, "memory", str(demo))
    assert not re.search(r"\d (KB|MB|GB)\b", text) and "KiB" in text
    text = _shown(screen, "memory-viewer", str(MI300))
    assert "Peak heap 1.08 GiB" in text and "0.00 MiB" not in text


def test_steps_found_in_words(screen: io.StringIO, demo: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    steps = _json(capsys, "report", str(demo))["steps"]
    assert steps["found_by"] == "root" and steps["marker"] == "train"  # the machine keys
    assert steps["found_by_text"].startswith("Steps were found from step markers ('train')")
    assert "stepscope.Trace" in steps["found_by_text"]
    text = _shown(screen, "report", str(demo))
    assert "Steps found by: root" not in text
    assert "Steps were found from step markers ('train')" in text
    torch = _json(capsys, "report", str(QWEN))["steps"]
    assert torch["found_by"] == "profiler_step"
    assert "PyTorch's ProfilerStep#N annotations" in torch["found_by_text"]
    tf = _json(capsys, "report", str(TF_GPU))["steps"]
    assert tf["found_by"] == "device_steps"
    assert tf["found_by_text"].startswith("Steps were found from the devices' Steps lines")


def test_steps_found_sentence_for_every_method() -> None:
    from stepscope.analysis.run_model.steps_found import steps_found_sentence

    assert "('Profiled batch'), as Keras's" in steps_found_sentence(["step_num"],
                                                                   ["Profiled batch"])
    assert "XLA program that took the most device time ('jit_step')" in steps_found_sentence(
        ["xla_module"], ["jit_step"])
    assert "step markers (several event names)" in steps_found_sentence(["root"], ["root"])
    two = steps_found_sentence(["profiler_step", "root"], ["ProfilerStep#3", "train"])
    assert two.startswith("Steps were found (per host) from PyTorch's") and "; and " in two
    assert steps_found_sentence(["none"], []).startswith("No steps were found")
