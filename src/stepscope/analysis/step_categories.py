"""The overview's step-time categories, in the order they are shown, and their labels
(NumPy-free: the terminal report prints a kept overview without importing the analysis)."""

from __future__ import annotations

CATEGORIES = ("device_compute", "device_collectives", "device_to_device", "input", "output",
              "compilation", "kernel_launch", "host_compute", "all_others")
CATEGORY_LABELS = {
    "device_compute": "device compute", "device_collectives": "collectives",
    "device_to_device": "device-to-device",
    "input": "input", "output": "output", "compilation": "compilation",
    "kernel_launch": "kernel launch", "host_compute": "host compute",
    "all_others": "all others",
}
