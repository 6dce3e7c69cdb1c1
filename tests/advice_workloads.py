"""Real TensorFlow input pipelines, good and bad, for the advice tests."""

TF_PIPELINE = """
import sys, tensorflow as tf
logdir, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def double(v):
    return v * 2

ds = tf.data.Dataset.from_tensor_slices(tf.random.normal([8192, 32]))
if mode == "good":
    # A map worth running in parallel (a 768×768 matmul per batch): the parallel map is
    # still the bottleneck of so small a step.
    def heavy(x):
        y = tf.tile(x, [24, 24])
        return x * tf.reduce_mean(tf.linalg.matmul(y, y))

    # One batch ahead: a deeper buffer fills while the profiler starts and hides the map.
    ds = (ds.batch(32).map(heavy, num_parallel_calls=tf.data.AUTOTUNE).repeat()
          .prefetch(1))
else:
    # Python in the pipeline, one element at a time, before batching, no prefetch.
    ds = (ds.map(lambda x: tf.py_function(double, [x], tf.float32))
          .map(lambda x: x + 1).batch(32).repeat())
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.map_and_batch_fusion = False
    # Keep the cheap map serial: made parallel, its cost is its wait less its producer's
    # time, and on a busy machine thread wake-ups fill that residual.
    options.experimental_optimization.map_parallelization = False
    ds = ds.with_options(options)
w = tf.Variable(tf.random.normal([32, 32]))

@tf.function
def step(x):
    return tf.reduce_sum(tf.nn.relu(x @ w))

it = iter(ds)
for _ in range(0 if mode == "cold" else 3):  # "cold": the first step traces the function
    step(next(it))
tf.profiler.experimental.start(logdir)
for i in range(steps):
    if mode == "outside":
        x = next(it)  # the batch is fetched outside the step annotation
        with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
            step(x)
    else:
        with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
            step(next(it))
tf.profiler.experimental.stop()
"""

TF_FILES = """
import os, sys, numpy as np, tensorflow as tf
logdir, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
data = os.path.join(logdir, "data")
os.makedirs(data, exist_ok=True)
files = []
rng = np.random.default_rng(0)
for k in range(4):  # GZIP TFRecord files: reading them costs decompression
    name = os.path.join(data, f"part{k}.tfrecord.gz")
    with tf.io.TFRecordWriter(name, options="GZIP") as w:
        for _ in range(2):  # 4 MB records: each read decompresses 4 MB
            w.write(rng.integers(0, 4, 1 << 22, dtype=np.uint8).tobytes())
    files.append(name)
if mode == "serial":
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP")
else:  # read files in parallel, then cache what was read
    ds = (tf.data.Dataset.from_tensor_slices(files)
          .interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
                      num_parallel_calls=tf.data.AUTOTUNE).cache())
# A cheap map (64 bytes of each record): reading the record costs many times more.
ds = ds.map(lambda r: tf.reduce_sum(tf.cast(tf.io.decode_raw(tf.strings.substr(r, 0, 64),
                                                     tf.uint8), tf.float32)))
ds = ds.batch(2).repeat()
options = tf.data.Options()
options.experimental_optimization.inject_prefetch = False
# The map and the batch stay serial stages on the consumer's thread, the read inside them:
# fused, they run on a thread of their own, and their wait for the read, less the read's
# time, counts as their own work: a busy machine's waits for a core made it the bottleneck.
options.experimental_optimization.map_and_batch_fusion = False
options.experimental_optimization.map_parallelization = False
ds = ds.with_options(options)

@tf.function
def step(x):
    return tf.reduce_sum(x * 2)

it = iter(ds)
for _ in range(40):  # one pass over the files: the cache is full
    step(next(it))
tf.profiler.experimental.start(logdir)
for i in range(steps):
    with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
        step(next(it))
tf.profiler.experimental.stop()
"""

# PyTorch, the README's pattern: a schedule and `for batch in loader`, a slow dataset read in
# the training process (num_workers=0): input-bound, the DataLoader's fault.
TORCH_LOADER = """
import sys, time, torch, stepscope, stepscope.torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 400
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.full((16,), float(i))

model = torch.nn.Linear(16, 16)
loader = DataLoader(Slow(), batch_size=4, num_workers=0)
with stepscope.torch.profile(sys.argv[1], options=stepscope.ProfilerOptions(
        counter_interval_ms=0), schedule=stepscope.torch.schedule(
        wait=1, warmup=1, active=6, repeat=1)) as prof:
    for i, batch in enumerate(loader):
        model(batch).sum().backward()
        prof.step()
        if i == 9:
            break
print(prof.paths[0])
"""

# A stepscope.data pipeline (plain Python): a slow serial map, no prefetch.
PYTHON_PIPELINE = """
import sys, time, stepscope
from stepscope import data

def slow(x):
    time.sleep(0.003)
    return x

it = iter(data.instrument(range(10_000)).map(slow).batch(4))
with stepscope.Profile(sys.argv[1], options=stepscope.ProfilerOptions(counter_interval_ms=0)):
    for i in range(12):
        with stepscope.Trace("train", step_num=i, _r=1):
            next(it)
            sum(j * j for j in range(20_000))
"""

# A pure-compute jitted JAX loop on the CPU, 20 steps, under stepscope (the README's recipe).
JAX_LOOP = """
import sys, jax, jax.numpy as jnp, stepscope

@jax.jit
def step(w, x):
    return w - 0.01 * jax.grad(lambda w: jnp.sum(jax.nn.relu(x @ w)))(w)

# Big enough that the step's compute, not Python's dispatch of it, fills the step.
w, x = jnp.ones((768, 768)), jnp.ones((512, 768))
w = step(w, x).block_until_ready()
with stepscope.Profile(sys.argv[1], options=stepscope.ProfilerOptions(counter_interval_ms=0)):
    for i in range(20):
        with stepscope.Trace("train", step_num=i, _r=1):
            w = step(w, x).block_until_ready()
"""

# Work of each framework with no step markers at all.
NO_STEPS = {
    "torch": """
import sys, torch, stepscope
model = torch.nn.Linear(32, 32)
with stepscope.Profile(sys.argv[1], options=stepscope.ProfilerOptions(counter_interval_ms=0)):
    for _ in range(5):
        model(torch.randn(8, 32)).sum().backward()
""",
    "jax": """
import sys, jax, jax.numpy as jnp, stepscope
f = jax.jit(lambda w: jnp.tanh(w @ w))
w = f(jnp.ones((64, 64))).block_until_ready()
with stepscope.Profile(sys.argv[1], options=stepscope.ProfilerOptions(counter_interval_ms=0)):
    for _ in range(5):
        w = f(w).block_until_ready()
""",
    "python": """
import sys, stepscope
with stepscope.Profile(sys.argv[1], options=stepscope.ProfilerOptions(counter_interval_ms=0)):
    for _ in range(5):
        with stepscope.Trace("work"):
            sum(j * j for j in range(50_000))
""",
}
