"""XLA op profile benchmark: stepscope against XProf on the same XSpace files, side by side.

Profiles:

* the real XLA fixtures of ../shared/fixtures (TPU v6e JAX, MI300 JAX, MI355 JAX+TE);
* ``tpu-x<K>`` and ``mi300-x<K>``: the TPU v6e and MI300 fixtures with every device's "XLA
  Ops" (TPU) or kernel stream (GPU) events repeated K times (each copy shifted past the
  last), so that the op count grows while the programs stay real; XProf reads them too.

For each, in fresh directories (so neither side's cache answers), it times:

1. stepscope cold: read the XLA parts of the file (``load_xla``), build the XLA model, then the
   op profile and HLO op stats;
2. stepscope cached: ``open_xla_model`` again (one cache entry) and both tools;
3. XProf: ``xspace_to_tool_data`` for ``op_profile`` and ``hlo_stats`` (each from the file:
   XProf caches its OpStats beside it, so each converter gets a fresh copy).

Run: ``.venv/bin/python benchmarks/xla.py [--repeat-events K] [--repeats N]``. Figures are the
median of ``--repeats`` runs (default 3).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (this checkout's sources first, for every process started)

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "gpu"
TPU = FIXTURES / "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb"
MI300 = FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb"
MI355 = (FIXTURES / "TraceLens/tests/test_data_jax_te_fused_attn_categorization/"
         "934987a2fc2f.xplane.pb")


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times), result


def _amplified(src: Path, dst: Path, k: int) -> Path:
    """``src`` with each "XLA Ops" or stream line's events repeated ``k`` times, shifted."""
    from stepscope.formats.xplane_proto import XSpace

    space = XSpace.FromString(src.read_bytes())
    for plane in space.planes:
        for line in plane.lines:
            if not (line.name == "XLA Ops" or line.name.startswith("Stream #")) \
                    or not line.events or not plane.name.startswith("/device:"):
                continue
            events = list(line.events)
            span = max(e.offset_ps + e.duration_ps for e in events) - min(
                e.offset_ps for e in events)
            for i in range(1, k):
                for e in events:
                    copy = line.events.add()
                    copy.CopyFrom(e)
                    copy.offset_ps = e.offset_ps + i * span
                    for stat in copy.stats:  # the device-clock offset moves with it
                        name = plane.stat_metadata[stat.metadata_id].name
                        which = stat.WhichOneof("value")
                        if name == "device_offset_ps" and which in ("int64_value",
                                                                     "uint64_value"):
                            setattr(stat, which, getattr(stat, which) + i * span)
    dst.write_bytes(space.SerializeToString())
    return dst


def _ours_cold(path: Path) -> Any:
    from stepscope.analysis.xla.hlo_op_stats import hlo_op_stats
    from stepscope.analysis.xla.op_profile import op_profile
    from stepscope.analysis.xla.xla_model import build_xla_model
    from stepscope.formats.xspace_to_xla import load_xla

    model = build_xla_model({"host": load_xla(path)})
    return op_profile(model).to_dict(), hlo_op_stats(model).to_dict()


def _ours_cached(path: Path) -> Any:
    from stepscope.analysis.xla.hlo_op_stats import hlo_op_stats
    from stepscope.analysis.xla.op_profile import op_profile
    from stepscope.run.loader import open_xla_model

    model = open_xla_model(path)
    return op_profile(model).to_dict(), hlo_op_stats(model).to_dict()


def _xprof(path: Path, scratch: Path) -> Any:
    from xprof.convert import raw_to_tool_data

    out = []
    for tool in ("op_profile", "hlo_stats"):
        fresh = Path(tempfile.mkdtemp(dir=scratch))
        copy = fresh / path.name
        shutil.copy(path, copy)
        data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], tool, {})
        out.append(data)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat-events", type=int, default=50,
                        help="K for the amplified TPU profile (default 50)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="stepscope-xla-bench-"))
    os.environ["STEPSCOPE_CACHE_DIR"] = str(scratch / "cache")
    try:
        profiles = {"tpu-v6e": TPU, "mi300": MI300, "mi355-te": MI355}
        (scratch / "big").mkdir()
        profiles[f"tpu-x{args.repeat_events}"] = _amplified(
            TPU, scratch / "big" / "tpu.xplane.pb", args.repeat_events)
        gpu_k = args.repeat_events * 40
        (scratch / "big-gpu").mkdir()
        profiles[f"mi300-x{gpu_k}"] = _amplified(
            MI300, scratch / "big-gpu" / "mi300.xplane.pb", gpu_k)
        print(f"{'profile':<12} {'XLA ops':>9} {'MB':>6} {'ours cold ms':>13} "
              f"{'ours cached ms':>15} {'XProf ms':>10} {'XProf/ours cold':>16}")
        for name, path in profiles.items():
            from stepscope.formats.xspace_to_xla import load_xla

            executions = len(load_xla(path))
            cold, _ = _timed(lambda p=path: _ours_cold(p), args.repeats)  # type: ignore[misc]
            _ours_cached(path)  # fill the cache
            cached, _ = _timed(lambda p=path: _ours_cached(p), args.repeats)  # type: ignore[misc]
            theirs, _ = _timed(lambda p=path: _xprof(p, scratch), args.repeats)  # type: ignore[misc]
            print(f"{name:<12} {executions:>9,} {path.stat().st_size / 1e6:>6.1f} {cold:>13.1f} "
                  f"{cached:>15.1f} {theirs:>10.1f} {theirs / cold:>15.2f}x")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
