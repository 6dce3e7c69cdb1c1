"""The Keras callback keeps TensorFlow's profiler noise out of the user's output (issue 30)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

FIT = """
import os, sys
os.environ["KERAS_BACKEND"] = "tensorflow"
import numpy as np, keras
import stepscope.keras
x = np.random.rand(256, 8).astype("float32")
y = np.random.rand(256, 1).astype("float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8), keras.layers.Dense(1)])
model.compile("sgd", "mse")
cb = stepscope.keras.ProfilerCallback(sys.argv[1], profile_batch=(2, 3))
print("-- fit --", flush=True)
print("-- fit --", file=sys.stderr, flush=True)
model.fit(x, y, batch_size=64, epochs=1, callbacks=[cb], verbose=0)
print("-- done --", flush=True)
print("-- done --", file=sys.stderr, flush=True)
print(cb.path)
"""


def test_keras_fit_prints_nothing_of_tensorflows_profiler(tmp_path: Path) -> None:
    # TF's own log level left at its default (INFO shown), as a user's shell has it.
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(FIT), str(tmp_path / "logs")],
                          capture_output=True, text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    # What TF prints at import is its own; what the fit prints is the callback's doing.
    out = done.stdout.split("-- fit --\n", 1)[1].split("-- done --\n", 1)[0]
    err = done.stderr.split("-- fit --\n", 1)[1].split("-- done --\n", 1)[0]
    assert out == "" and err == "", (out, err)
    assert "expects an i value" not in done.stderr and "stepscope-tf-" not in done.stderr
    # The profile was written, with the batches asked for.
    path = Path(done.stdout.strip().splitlines()[-1])
    assert path.is_file() and path.stat().st_size > 0
