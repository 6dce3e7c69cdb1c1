"""Published peak compute (FLOP/s per precision) and memory bandwidth of common accelerators.

Each figure is the vendor's published dense (no sparsity) peak; the source is named beside
it. A device that matches no entry has unknown peaks: utilisation is then left blank, never
guessed. Where a profile states its device's peaks itself (TPU planes carry
``peak_teraflops_per_second``), those win over this table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DevicePeaks:
    """One device model's peaks: TFLOP/s by precision and HBM bandwidth in GB/s (10^9 bytes/s,
    as data sheets state it; the tools show bandwidth in GiB/s)."""

    name: str
    tflops: dict[str, float] = field(default_factory=dict)  # "fp32", "bf16", "fp16", "fp8"...
    gbytes_per_s: float | None = None
    source: str = ""

    def peak_tflops(self, precision: str | None = None) -> float | None:
        """The peak for ``precision`` (its 16-bit figure when none is named or known)."""
        return self.peak_for(precision)[1]

    def peak_for(self, precision: str | None) -> tuple[str, float | None]:
        """(the precision whose figure is used, the peak) for ``precision``: its own figure,
        else the 16-bit one (a part without FP8 units runs FP8 work no faster; TPUs state
        only BF16)."""
        if precision and precision in self.tflops:
            return precision, self.tflops[precision]
        for key in ("bf16", "fp16", "fp32"):
            if key in self.tflops:
                return key, self.tflops[key]
        return "", None


def table_rows() -> list[DevicePeaks]:
    """Every device of the table, in matching order (for the docs and ``--peak`` help)."""
    return [peaks for _, peaks in _TABLE]


# (pattern on the device's name, peaks). The first match wins: specific before general.
# Dense figures: where a data sheet gives "with sparsity" figures only, half of them.
_TABLE: list[tuple[str, DevicePeaks]] = [
    # NVIDIA Tesla V100 datasheet (SXM2): 15.7 FP32, 125 tensor FP16 TFLOP/s, 900 GB/s HBM2.
    (r"v100.*pcie", DevicePeaks("NVIDIA V100 PCIe", {"fp32": 14.0, "fp16": 112.0}, 900.0,
                                "NVIDIA V100 datasheet (PCIe: 14 FP32, 112 tensor TFLOP/s)")),
    (r"v100", DevicePeaks("NVIDIA V100 SXM2", {"fp32": 15.7, "fp16": 125.0}, 900.0,
                          "NVIDIA V100 datasheet (SXM2: 15.7 FP32, 125 tensor TFLOP/s)")),
    # NVIDIA A100 datasheet: 19.5 FP32, 156 TF32, 312 BF16/FP16 dense TFLOP/s; HBM 1,555 GB/s
    # (40 GB) and 2,039 GB/s (80 GB SXM).
    (r"a100.*80", DevicePeaks("NVIDIA A100 80GB", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0,
                                                   "fp16": 312.0}, 2039.0,
                              "NVIDIA A100 datasheet (80GB SXM)")),
    (r"a100", DevicePeaks("NVIDIA A100 40GB", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0,
                                               "fp16": 312.0}, 1555.0,
                          "NVIDIA A100 datasheet (40GB)")),
    # NVIDIA H100 datasheet: SXM 67 FP32, 494.5 TF32, 989 BF16/FP16, 1,979 FP8 dense TFLOP/s,
    # 3.35 TB/s; PCIe 51 FP32, 378 TF32, 756 BF16, 1,513 FP8, 2.0 TB/s.
    (r"h100.*pcie", DevicePeaks("NVIDIA H100 PCIe", {"fp32": 51.0, "tf32": 378.0,
                                                     "bf16": 756.0, "fp16": 756.0,
                                                     "fp8": 1513.0}, 2000.0,
                                "NVIDIA H100 datasheet (PCIe)")),
    (r"h100", DevicePeaks("NVIDIA H100 SXM", {"fp32": 67.0, "tf32": 494.5, "bf16": 989.0,
                                              "fp16": 989.0, "fp8": 1979.0}, 3350.0,
                          "NVIDIA H100 datasheet (SXM)")),
    # NVIDIA H200 datasheet: 67 FP32, 494.5 TF32, 989 BF16, 1,979 FP8 dense TFLOP/s; 4.8 TB/s.
    (r"h200", DevicePeaks("NVIDIA H200", {"fp32": 67.0, "tf32": 494.5, "bf16": 989.0,
                                          "fp16": 989.0, "fp8": 1979.0}, 4800.0,
                          "NVIDIA H200 datasheet")),
    # NVIDIA DGX B200 datasheet, per GPU: 2.25 PFLOP/s dense BF16, 4.5 FP8; 8 TB/s HBM3e.
    # NVIDIA HGX B200 specifications, per GPU (1/8 of the 8-GPU board): 75 FP32, 1,125 TF32
    # dense TFLOP/s.
    (r"b200", DevicePeaks("NVIDIA B200", {"fp32": 75.0, "tf32": 1125.0, "bf16": 2250.0,
                                          "fp16": 2250.0, "fp8": 4500.0}, 8000.0,
                          "NVIDIA DGX/HGX B200 datasheets (per GPU, dense)")),
    # NVIDIA L40S datasheet: 91.6 FP32, 183 TF32, 362 BF16/FP16, 733 FP8 dense TFLOP/s;
    # 864 GB/s.
    (r"l40s", DevicePeaks("NVIDIA L40S", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.0,
                                          "fp16": 362.0, "fp8": 733.0}, 864.0,
                          "NVIDIA L40S datasheet (dense)")),
    # NVIDIA L4 datasheet: 30.3 FP32, 60 TF32, 121 BF16, 242.5 FP8 dense TFLOP/s; 300 GB/s.
    (r"\bl4\b", DevicePeaks("NVIDIA L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0,
                                          "fp16": 121.0, "fp8": 242.5}, 300.0,
                            "NVIDIA L4 datasheet (dense)")),
    # NVIDIA A10 datasheet: 31.2 FP32, 62.5 TF32, 125 BF16/FP16 dense TFLOP/s; 600 GB/s.
    (r"\ba10\b", DevicePeaks("NVIDIA A10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0,
                                            "fp16": 125.0}, 600.0,
                             "NVIDIA A10 datasheet (dense)")),
    # NVIDIA T4 datasheet: 8.1 FP32, 65 FP16 tensor TFLOP/s; 320 GB/s.
    (r"\bt4\b", DevicePeaks("NVIDIA T4", {"fp32": 8.1, "fp16": 65.0}, 320.0,
                            "NVIDIA T4 datasheet")),
    # NVIDIA Ada Lovelace GPU architecture whitepaper (GeForce RTX 4090): 82.6 FP32 and TF32,
    # 165.2 FP16/BF16 tensor TFLOP/s with FP32 accumulate (dense); 1,008 GB/s.
    (r"rtx\s*4090", DevicePeaks("NVIDIA GeForce RTX 4090", {"fp32": 82.6, "tf32": 82.6,
                                                            "bf16": 165.2, "fp16": 165.2},
                                1008.0, "NVIDIA Ada Lovelace architecture whitepaper "
                                "(RTX 4090, FP32 accumulate, dense)")),
    # AMD Instinct MI325X data sheet: 163.4 FP32 matrix, 653.7 TF32, 1,307.4 BF16/FP16,
    # 2,614.9 FP8 dense TFLOP/s; 6 TB/s HBM3E.
    (r"mi325", DevicePeaks("AMD Instinct MI325X", {"fp32": 163.4, "tf32": 653.7,
                                                   "bf16": 1307.4, "fp16": 1307.4,
                                                   "fp8": 2614.9}, 6000.0,
                           "AMD Instinct MI325X data sheet")),
    # AMD Instinct MI300X data sheet: 163.4 FP32 matrix, 653.7 TF32, 1,307.4 BF16/FP16 dense,
    # 2,614.9 FP8 dense TFLOP/s; 5.3 TB/s HBM3.
    (r"mi300x|gfx942", DevicePeaks("AMD Instinct MI300X", {"fp32": 163.4, "tf32": 653.7,
                                                           "bf16": 1307.4, "fp16": 1307.4,
                                                           "fp8": 2614.9},
                                   5300.0, "AMD Instinct MI300X data sheet")),
    # AMD Instinct MI355X data sheet: 157.3 FP32 matrix, 2,516.6 BF16/FP16 dense, 5,033.2 FP8
    # dense TFLOP/s; 8 TB/s HBM3E.
    (r"mi355", DevicePeaks("AMD Instinct MI355X", {"fp32": 157.3, "bf16": 2516.6,
                                                   "fp16": 2516.6, "fp8": 5033.2}, 8000.0,
                           "AMD Instinct MI355X data sheet")),
    # AMD Instinct MI250X data sheet: 95.7 FP32 matrix, 383 BF16/FP16 TFLOP/s; 3.2768 TB/s.
    (r"mi250x", DevicePeaks("AMD Instinct MI250X", {"fp32": 95.7, "bf16": 383.0,
                                                    "fp16": 383.0}, 3276.8,
                            "AMD Instinct MI250X data sheet")),
    # AMD Instinct MI250 data sheet: 90.5 FP32 matrix, 362.1 BF16/FP16 TFLOP/s; 3.2768 TB/s.
    (r"mi250", DevicePeaks("AMD Instinct MI250", {"fp32": 90.5, "bf16": 362.1,
                                                  "fp16": 362.1}, 3276.8,
                           "AMD Instinct MI250 data sheet")),
    # Google Cloud TPU documentation (system architecture pages), per chip, BF16 peak and HBM.
    (r"v6\s*lite|v6e", DevicePeaks("TPU v6e", {"bf16": 918.0}, 1640.0,
                                   "Cloud TPU v6e documentation: 918 BF16 TFLOP/s, 1,640 GB/s")),
    (r"v5\s*lite|v5e", DevicePeaks("TPU v5e", {"bf16": 197.0}, 819.0,
                                   "Cloud TPU v5e documentation: 197 BF16 TFLOP/s, 819 GB/s")),
    (r"v5p", DevicePeaks("TPU v5p", {"bf16": 459.0}, 2765.0,
                         "Cloud TPU v5p documentation: 459 BF16 TFLOP/s, 2,765 GB/s")),
    (r"tpu\s*v4", DevicePeaks("TPU v4", {"bf16": 275.0}, 1200.0,
                              "Cloud TPU v4 documentation: 275 BF16 TFLOP/s, 1,200 GB/s")),
]

# An element type's precision class, for choosing a peak.
PRECISION_OF = {"f32": "fp32", "bf16": "bf16", "f16": "fp16", "f64": "fp64",
                "f8e4m3fn": "fp8", "f8e5m2": "fp8", "f8e4m3": "fp8", "f8e5m2fnuz": "fp8",
                "f8e4m3fnuz": "fp8"}


def lookup(device_name: str) -> DevicePeaks | None:
    """The published peaks of the device called ``device_name``, or None when unknown."""
    text = device_name.lower()
    for pattern, peaks in _TABLE:
        if re.search(pattern, text):
            return peaks
    return None


def identify(kind: str, props: dict[str, object]) -> str:
    """A device's model from what its plane says: its name, or its vendor, compute capability
    and core count (GPU planes name no model); "" when it cannot be told."""
    if kind and lookup(kind) is not None:
        return kind
    vendor = str(props.get("device_vendor", "")).lower()
    try:
        cc = (int(str(props.get("compute_cap_major", -1))),
              int(str(props.get("compute_cap_minor", -1))))
        cores = int(str(props.get("core_count", 0)))
    except ValueError:
        return kind
    if "amd" in vendor:
        if cc == (9, 4) and cores >= 304:  # MI300X and MI325X: told apart by memory
            memory = props.get("memory_size")
            big = isinstance(memory, int) and memory > 200 * 1024 ** 3
            return "AMD Instinct MI325X" if big else "AMD Instinct MI300X"
        return "AMD Instinct MI300X" if cc == (9, 4) and cores >= 228 else kind
    if vendor and "nvidia" not in vendor:
        return kind
    models = {(7, 0): "NVIDIA V100", (8, 0): "NVIDIA A100", (10, 0): "NVIDIA B200"}
    if cc == (9, 0):
        return "NVIDIA H100 SXM" if cores >= 132 else "NVIDIA H100 PCIe"
    if cc == (8, 0):
        memory = props.get("memory_size")
        big = isinstance(memory, int) and memory > 50 * 1024 ** 3
        return "NVIDIA A100 80GB" if big else "NVIDIA A100 40GB"
    return models.get(cc, kind)
