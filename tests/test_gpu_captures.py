"""Real GPU captures by stepscope's bridges, checked against the references recorded beside
them: PyTorch's ``key_averages()`` of the same recording, the CUDA caching allocator's peak,
the step's FLOPs counted by hand, and PyTorch's own trace file of the same recording.

The files in ``tests/data/h200/`` were captured on an NVIDIA H200 (PyTorch 2.11 + CUDA 13,
JAX 0.11.2, CuPy 14.2 with cupti-python 13.0) by ``scripts/gpu_check/`` (its README says how);
each ``*.facts.json`` holds what the capturing program measured itself.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from stepscope.run.run import open_run

H200 = Path(__file__).parent / "data" / "h200"
TORCH = H200 / "torch_bridge.xplane.pb"
TORCH_TRACE = H200 / "torch_bridge.pt.trace.json.gz"
CUPY = H200 / "cupy_bridge.xplane.pb"
# Kineto's device events that are no kernel (key_averages lists them as device keys too).
NOT_KERNELS = ("gpu_user_annotation", "gpu_memcpy", "gpu_memset")


def _facts(name: str) -> dict[str, Any]:
    return json.loads((H200 / f"{name}.facts.json").read_text())


def _trace() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads(gzip.decompress(TORCH_TRACE.read_bytes()))[
        "traceEvents"]
    return events


@pytest.fixture(scope="module")
def torch_run() -> Any:
    return open_run(TORCH, cache=False)


def test_torch_bridge_kernels_match_key_averages(torch_run: Any) -> None:
    trace = _trace()
    not_kernel = {e["name"] for e in trace if e.get("cat") in NOT_KERNELS}
    want = {r["key"]: (r["count"], r["self_device_time_total"])
            for r in _facts("torch_bridge")["key_averages"]
            if "CUDA" in r["device_type"] and r["key"] not in not_kernel}
    ours: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for row in torch_run.tool("kernel_stats").data["rows"]:
        ours[row["kernel"]][0] += row["occurrences"]
        ours[row["kernel"]][1] += row["total_us"]
    assert len(want) >= 10 and set(ours) == set(want)
    for name, (count, us) in want.items():
        assert ours[name][0] == count, name
        assert ours[name][1] == pytest.approx(us, rel=1e-6, abs=0.01), name
    # cuBLAS's Hopper GEMMs (nvjet) use Tensor Cores and were launched by aten::mm.
    gemms = [r for r in torch_run.tool("kernel_stats").data["rows"]
             if r["kernel"].startswith("nvjet_sm90")]
    assert gemms and all(r["kernel_uses_tensor_core"] and r["op"] == "aten::mm"
                         for r in gemms)


def test_torch_bridge_host_ops_match_key_averages(torch_run: Any) -> None:
    """Count, self and total time of every host key of key_averages(), ops and CUDA runtime
    calls alike: the calls inside an op are not its self time but rows of their own, and
    aten::div's redispatch to itself on CUDA is one occurrence."""
    ops = {o["name"]: o for o in torch_run.tool("framework_op_stats").data["ops"]
           if o["host_or_device"] == "Host"}
    # Kineto writes its own buffer work ("overhead") on no thread; key_averages nests it
    # under whatever op it fell in. Those ops are left out of the self-time check.
    trace = _trace()
    overhead = [(e["ts"], e["ts"] + e["dur"]) for e in trace if e.get("cat") == "overhead"]
    around_overhead = {e["name"] for e in trace if e.get("cat") == "cpu_op" and any(
        e["ts"] <= a and b <= e["ts"] + e["dur"] for a, b in overhead)}
    checked = 0
    for r in _facts("torch_bridge")["key_averages"]:
        if "CPU" not in r["device_type"] or r["key"] == "[memory]":  # memory: no op
            continue
        mine = ops[r["key"]]
        assert mine["occurrences"] == r["count"], r["key"]
        assert mine["total_ms"] * 1e3 == pytest.approx(r["cpu_time_total"], rel=1e-6, abs=0.01)
        if r["key"] not in around_overhead:
            assert mine["self_ms"] * 1e3 == pytest.approx(r["self_cpu_time_total"], rel=1e-6,
                                                          abs=0.01), r["key"]
            checked += 1
    assert checked >= 40
    assert ops["aten::div"]["occurrences"] == 8  # 16 events: each nested in one of its name
    assert ops["cudaDeviceSynchronize"]["type"] == "cuda_runtime"
    assert ops["cuLaunchKernelEx"]["type"] == "cuda_driver"


def test_torch_bridge_reads_as_its_own_trace_file(torch_run: Any) -> None:
    """The bridge's profile and PyTorch's trace file of the same recording give the same
    kernels, ops, GPU memory and GPU time breakdown: one analysis reads both."""
    theirs = open_run(TORCH_TRACE, cache=False)

    def kernels(run: Any) -> dict[tuple[str, str], tuple[int, float]]:
        # By kernel and op: this capture predates the launch figures' fallback (PyTorch 2.11
        # gives none in its events; test_launch_figures_... covers that), so rows that only
        # differ by launch figures are summed.
        out: dict[tuple[str, str], tuple[int, float]] = {}
        for r in run.tool("kernel_stats").data["rows"]:
            count, total = out.get((r["kernel"], r["op"]), (0, 0.0))
            out[(r["kernel"], r["op"])] = (count + r["occurrences"], total + r["total_us"])
        return {k: (c, round(t, 3)) for k, (c, t) in out.items()}

    assert kernels(torch_run) == kernels(theirs)

    def ops(run: Any) -> dict[tuple[str, str], Any]:
        return {(o["host_or_device"], o["name"]): (o["occurrences"], o["total_ms"], o["self_ms"])
                for o in run.tool("framework_op_stats").data["ops"]
                if o["name"] != "Activity Buffer Request"}  # Kineto's own work: "overhead"
                # in the file, told as an op by this capture's bridge (before the name rule)

    assert ops(torch_run) == ops(theirs)

    def gpu_memory(run: Any) -> Any:
        (gpu,) = [a for a in run.tool("memory_profile").data["allocators"]
                  if a["name"].startswith("cuda")]
        return gpu["peak_bytes_in_use"], gpu["num_allocations"], gpu["peak_step"]

    assert gpu_memory(torch_run)[:2] == gpu_memory(theirs)[:2]
    mine = torch_run.tool("gpu_timeline").data["devices"][0]["breakdown"]
    file = theirs.tool("gpu_timeline").data["devices"][0]["breakdown"]
    assert mine["compute_us"] == pytest.approx(file["compute_us"], rel=1e-9)
    assert mine["memory_us"] == pytest.approx(file["memory_us"], rel=1e-9)


def test_torch_bridge_steps_memory_and_flops(torch_run: Any) -> None:
    facts = _facts("torch_bridge")
    overview = torch_run.tool("overview_page").data
    assert overview["steps"]["count"] == len(facts["wall_ms"]) == 8
    assert overview["steps"]["avg_ms"] == pytest.approx(
        sum(facts["wall_ms"]) / len(facts["wall_ms"]), rel=0.02)
    assert overview["environment"]["device_type"] == "GPU"
    (gpu,) = [a for a in torch_run.tool("memory_profile").data["allocators"]
              if a["name"].startswith("cuda")]
    assert gpu["peak_bytes_in_use"] == facts["max_memory_allocated"]
    (host,) = overview["mfu"]["hosts"].values()
    per_step = [s["model_tflop"] * 1e12 for s in host["steps"]]
    assert per_step == [pytest.approx(facts["flops_per_step"], rel=1e-9)] * 8
    assert host["precision"] == "bf16"
    # MFU on the H200's published bf16 peak, named from the device plane.
    assert overview["environment"]["device_names"] == [facts["device"]] == ["NVIDIA H200"]
    assert host["peak_tflops"] == 989.0
    wall_s = sum(facts["wall_ms"]) / len(facts["wall_ms"]) / 1e3
    assert overview["mfu"]["mfu"] == pytest.approx(
        facts["flops_per_step"] / wall_s / 989e12, rel=0.02)


def _kineto_event(e: dict[str, Any], with_type: bool) -> Any:
    """A stand-in for ``torch._C._autograd._KinetoEvent`` made from a trace file's event:
    PyTorch 2.12 on gives ``activity_type``; 2.11, on which these files were recorded, not."""
    on_device = e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")

    class Event:
        def name(self) -> str:
            return str(e["name"])

        def device_type(self) -> str:
            return "DeviceType.CUDA" if on_device else "DeviceType.CPU"

        def is_user_annotation(self) -> bool:
            return e["cat"] in ("user_annotation", "gpu_user_annotation")

    if with_type:
        Event.activity_type = lambda self: e["cat"]  # type: ignore[attr-defined]
    return Event()


@pytest.mark.parametrize("with_type", [True, False], ids=["torch>=2.12", "torch<=2.11"])
def test_activity_type_of_every_event_of_a_real_gpu_recording(with_type: bool) -> None:
    from stepscope.capture.bridges.pytorch import activity_type

    events = [e for e in _trace() if e.get("ph") in ("X", "i") and e.get("cat") not in
              (None, "Trace", "fwdbwd", "ac2g")]
    cats = {e["cat"] for e in events}
    assert {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy",
            "gpu_memset", "gpu_user_annotation", "cpu_instant_event", "overhead"} <= cats
    wrong = [(e["cat"], e["name"][:60]) for e in events
             if activity_type(_kineto_event(e, with_type)) != e["cat"]]
    assert wrong == []


class _Recording:
    """A stand-in for ``torch.profiler.profile`` whose trace file is the H200 recording's."""

    def export_chrome_trace(self, path: str) -> None:
        Path(path).write_bytes(gzip.decompress(TORCH_TRACE.read_bytes()))


def test_launch_figures_come_from_kinetos_trace_file_where_events_lack_them(
        tmp_path: Path) -> None:
    """PyTorch 2.11's events give no launch figures for CUDA kernels: the bridge reads them
    from Kineto's own trace file of the recording, and its planes then give the kernel rows
    (figures and all) that the file gives."""
    import stepscope
    from stepscope.analysis.run_model.kernel_stats import kernel_stats
    from stepscope.capture.bridges.pytorch import convert, launch_figures
    from stepscope.formats import xplane_builder as xb
    from stepscope.model import schema

    device = [e for e in _trace() if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]

    def event(e: dict[str, Any]) -> Any:
        fake = _kineto_event(e, with_type=False)
        fake.start_ns = lambda: round(e["ts"] * 1000)
        fake.duration_ns = lambda: round(e["dur"] * 1000)
        fake.device_index = lambda: e["args"]["device"]
        fake.device_resource_id = lambda: e["args"]["stream"]
        fake.correlation_id = lambda: e["args"]["correlation"]
        fake.metadata_json = lambda: ""  # as PyTorch 2.11 gives it for kernels
        return fake

    launches = launch_figures(_Recording())
    assert len(launches) == sum(e["cat"] == "kernel" for e in device)
    data = convert([event(e) for e in device], launches=launches)
    space = xb.new_space("h200")
    for plane in data.planes:
        space.planes.add().CopyFrom(plane)
    env = xb.add_plane(space, schema.TASK_ENV_PLANE_ID, schema.TASK_ENV_PLANE)
    env.add_plane_stat(schema.ENV_PROFILE_START_TIME, 0)
    path = tmp_path / "h200.xplane.pb"
    xb.write_space(space, path)

    def rows(source: Path) -> list[tuple[Any, ...]]:
        return sorted((r.kernel, r.registers_per_thread, r.shared_memory_bytes, r.block, r.grid,
                       r.occurrences, round(r.total_us, 3))
                      for r in kernel_stats(stepscope.load(str(source))).rows)

    mine = rows(path)
    assert mine == rows(TORCH_TRACE)
    assert all(r[1] is not None and r[4] is not None for r in mine)


def test_cupy_capture_through_cupti() -> None:
    """CuPy with no framework: the CUDA bridge's kernels with their launch figures, copies
    both ways, and the runtime calls on the thread that made them."""
    facts = _facts("cupy_bridge")
    run = open_run(CUPY, cache=False)
    steps = len(facts["wall_ms"])
    assert run.tool("overview_page").data["steps"]["count"] == steps
    rows = run.tool("kernel_stats").data["rows"]
    (gemm,) = [r for r in rows if "gemm" in r["kernel"]]
    assert gemm["occurrences"] == steps and gemm["kernel_uses_tensor_core"]
    assert gemm["registers_per_thread"] and gemm["grid"] and gemm["block"]
    assert {"cupy_tanh__float32_float32", "cupy_add__float32_float32_float32"} <= \
        {r["kernel"] for r in rows}
    copies = {o["name"]: o["occurrences"] for o in run.tool("framework_op_stats").data["ops"]
              if o["host_or_device"] == "Device" and o["name"].startswith("Memcpy")}
    assert copies == {"Memcpy HTOD": steps, "Memcpy DTOH": steps}
    # The launches are on the main thread's line, beside the steps (CUPTI's thread ids).
    import stepscope

    (table,) = stepscope.load(str(CUPY)).hosts.values()
    launches = [i for i, n in enumerate(table.names) if n.startswith("cudaLaunchKernel")]
    lines = {table.line_name[int(table.line[r])] for r in range(len(table))
             if int(table.name[r]) in launches}
    assert lines == {"MainThread"}


def test_bf16_gpu_run_is_told_as_one(torch_run: Any) -> None:
    """The GEMMs of this bf16 model are cuBLAS's nvjet kernels, whose names do not say their
    precision: their op's input types do. So the overview says 16-bit, and the advice neither
    asks for mixed precision nor for pinned memory (the copies come from pinned memory)."""
    precision = torch_run.tool("overview_page").data["precision"]
    assert precision["16bit_percent"] > 90
    advice = {r["rule"]: r["text"] for r in torch_run.tool("advice").data["recommendations"]}
    assert "mixed_precision" not in advice
    assert "pin_memory" not in advice.get("host_to_device_copies", "")
    assert "already come from pinned memory" in advice["host_to_device_copies"]
    # A float32 CuPy run stays 32-bit.
    cupy = open_run(CUPY, cache=False).tool("overview_page").data["precision"]
    assert cupy["32bit_percent"] == 100.0


JAX = H200 / "jax_bridge.xplane.pb"


def test_jax_command_buffer_counts_its_programs_flops() -> None:
    """XLA ran the whole jitted step as one command buffer (a CUDA graph): its kernels all
    name ``command_buffer_1``, an op the kept HLO does not hold. Each kernel gets the HLO op
    it ran (``command_buffers``), each op runs once a step, so that the step's model FLOPs
    are the program's, and MFU comes out (on the bf16 peak of the H200)."""
    facts = _facts("jax_bridge")
    run = open_run(JAX, cache=False)
    steps = len(facts["wall_ms"])
    ops = run.tool("hlo_op_stats").data["ops"]
    assert "command_buffer_1" not in {o["name"] for o in ops}
    gemms = [o for o in ops if o["name"].startswith("custom-call")]
    assert len(gemms) == 11 and all(o["executions"] == steps for o in gemms)
    # The GEMMs are the hand count exactly; the elementwise ops add under 0.2 %.
    assert sum(o["flops"] for o in gemms) / steps == facts["flops_per_step"]
    per_step = sum(o["flops"] or 0 for o in ops) / steps
    assert facts["flops_per_step"] <= per_step <= 1.002 * facts["flops_per_step"]
    overview = run.tool("overview_page").data
    (host,) = overview["mfu"]["hosts"].values()
    assert host["precision"] == "bf16" and host["peak_tflops"] == 989.0
    assert overview["environment"]["device_names"] == ["NVIDIA H200"]
    wall_s = sum(facts["wall_ms"]) / steps / 1e3
    assert overview["mfu"]["mfu"] == pytest.approx(
        facts["flops_per_step"] / wall_s / 989e12, rel=0.02)
    # bf16 as the HLO says (the nvjet kernels' names do not), and no advice to use it.
    assert overview["precision"]["16bit_percent"] > 95
    assert "mixed_precision" not in {r["rule"] for r in overview["recommendations"]}
    # The GPU's allocator peak is the device's own.
    peaks = [a["peak_bytes_in_use"] for a in run.tool("memory_profile").data["allocators"]]
    assert facts["memory_stats"]["peak_bytes_in_use"] in peaks


@pytest.mark.parametrize("written", [b"", b'{"traceEvents": [', b"\x00\xff" * 50,
                                     b'{"traceEvents": [{"cat": "kernel", "args": 7}, 3]}'])
def test_launch_figures_of_a_bad_trace_file_are_none(tmp_path: Path, written: bytes) -> None:
    """Kineto's trace file empty, truncated, binary or absurd: no launch figures, no error
    (the bridge's events are kept without them)."""
    from stepscope.capture.bridges.pytorch import launch_figures

    class Recording:
        def export_chrome_trace(self, path: str) -> None:
            Path(path).write_bytes(written)

    assert launch_figures(Recording()) == {}
