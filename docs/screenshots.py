"""Refresh the README's screenshots from the browser tests' own.

The browser tests (``tests/test_*_ui.py``) drive every page in headless Chromium on real
profiles and save full-page screenshots to ``test-artifacts/ui/``. ``make screenshots`` runs
them and then this script, which copies the ones the README shows into ``docs/`` under stable
names, so the pictures are always of the current pages. A screenshot missing from the tests'
output is an error (a test was renamed or skipped), not a silently stale picture.

    .venv/bin/python docs/screenshots.py
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "test-artifacts" / "ui"
DOCS = ROOT / "docs"

# docs/<name>.png ← test-artifacts/ui/<shot>.png: one picture per page the README shows.
PICTURES = {
    "ui-overview": "overview-b_tensorflow",
    "ui-advice": "advice-a_bad_pipeline",
    "ui-op-stats": "ops-b_tensorflow",
    "ui-input": "input-b_tf_data",
    "ui-kernels": "kernels-d_gpu_v100",
    "ui-trace": "trace-gpu-flow",
    "ui-memory": "memory-gpu",
    "ui-pod": "pod-dlrm_8_ranks",
    "ui-op-profile": "xla-op-profile",
    "ui-memory-viewer": "memory-viewer",
    "ui-timeline": "timeline-legacy_pb",
    "ui-capture": "capture-dialog",
}


def main() -> int:
    missing = [shot for shot in PICTURES.values() if not (SHOTS / f"{shot}.png").is_file()]
    if missing:
        print(f"error: no screenshot {', '.join(missing)} in {SHOTS}; run the browser tests "
              "first (make screenshots does)", file=sys.stderr)
        return 2
    for name, shot in PICTURES.items():
        target = DOCS / f"{name}.png"
        partial = target.with_suffix(".png.tmp")
        shutil.copyfile(SHOTS / f"{shot}.png", partial)
        partial.replace(target)  # never a half-written picture
        print(f"docs/{target.name} ← {shot}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
