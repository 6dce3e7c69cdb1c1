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
        for _ in range(16):
            w.write(rng.integers(0, 4, 1 << 18, dtype=np.uint8).tobytes())
    files.append(name)
if mode == "serial":
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP")
else:  # read files in parallel, then cache what was read
    ds = (tf.data.Dataset.from_tensor_slices(files)
          .interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
                      num_parallel_calls=tf.data.AUTOTUNE).cache())
ds = ds.map(lambda r: tf.reduce_sum(tf.cast(tf.io.decode_raw(r, tf.uint8)[:64], tf.float32)))
ds = ds.batch(2).repeat()
options = tf.data.Options()
options.experimental_optimization.inject_prefetch = False
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
