"""Records RunMetadata of small TF1-style graphs on CPU (``tf.compat.v1.Session`` with
FULL_TRACE) and what TensorFlow's own timeline module draws from them.

Run as a script (``python tf_step_stats_recorder.py OUT_DIR``) so that TensorFlow stays out of
the test process. Per graph ``<g>`` it writes ``<g>.pb`` (RunMetadata), ``<g>.pbtxt`` (its text),
``<g>.step_stats.pb`` / ``<g>.step_stats.pbtxt`` (StepStats alone) and
``<g>.tf.<dataflow>.<memory>.json`` (TensorFlow's trace with those flags, 0/1), and
``<g>.ctf.json`` (TensorFlow's trace with memory and dataflow, as guides save it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _graphs(tf: object) -> dict[str, tuple[object, object, dict[object, object], object]]:
    import numpy as np

    tf1 = tf.compat.v1  # type: ignore[attr-defined]
    out = {}

    g = tf1.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [32, 48], name="x")  # type: ignore[attr-defined]
        w = tf1.Variable(tf.ones([48, 16]), name="w")  # type: ignore[attr-defined]
        b = tf1.Variable(tf.zeros([16]), name="b")  # type: ignore[attr-defined]
        h = tf.nn.relu(tf.matmul(x, w) + b, name="h")  # type: ignore[attr-defined]
        loss = tf.reduce_sum(h * h, name="loss")  # type: ignore[attr-defined]
        init = tf1.global_variables_initializer()
    out["mlp"] = (g, loss, {x: np.ones((32, 48), np.float32)}, init)

    g = tf1.Graph()
    with g.as_default():
        with tf.device("/cpu:0"):  # type: ignore[attr-defined]
            a = tf.random.uniform([64, 64], seed=1, name="a")  # type: ignore[attr-defined]
            left = tf.matmul(a, a, name="left")  # type: ignore[attr-defined]
        with tf.device("/cpu:1"):  # type: ignore[attr-defined]
            right = tf.matmul(a, tf.transpose(a), name="right")  # type: ignore[attr-defined]
            both = tf.add_n([left, right, tf.sqrt(tf.abs(a))], name="both")  # type: ignore
        total = tf.reduce_mean(both, name="total")  # type: ignore[attr-defined]
    out["two_cpus"] = (g, total, {}, None)

    g = tf1.Graph()
    with g.as_default():
        i0 = tf.constant(0, name="i0")  # type: ignore[attr-defined]
        v0 = tf.ones([8, 8], name="v0")  # type: ignore[attr-defined]
        _, v = tf1.while_loop(lambda i, v: i < 4, lambda i, v: (i + 1, tf.matmul(v, v) * 0.5),
                              [i0, v0], name="loop")
        result = tf.reduce_sum(v, name="result")  # type: ignore[attr-defined]
    out["while"] = (g, result, {}, None)
    return out


def main(out_dir: Path) -> None:
    import tensorflow as tf
    from tensorflow.python.client import timeline

    tf1 = tf.compat.v1
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, (graph, fetch, feed, init) in _graphs(tf).items():
        config = tf1.ConfigProto(device_count={"CPU": 2}, inter_op_parallelism_threads=2,
                                 allow_soft_placement=True)
        with tf1.Session(graph=graph, config=config) as sess:
            if init is not None:
                sess.run(init)
            sess.run(fetch, feed_dict=feed)  # warm up: the traced run is a steady one
            md = tf1.RunMetadata()
            sess.run(fetch, feed_dict=feed, run_metadata=md,
                     options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE))
        (out_dir / f"{name}.pb").write_bytes(md.SerializeToString())
        (out_dir / f"{name}.pbtxt").write_text(str(md))
        (out_dir / f"{name}.step_stats.pb").write_bytes(md.step_stats.SerializeToString())
        (out_dir / f"{name}.step_stats.pbtxt").write_text(str(md.step_stats))
        for dataflow in (0, 1):
            for memory in (0, 1):
                fresh = tf1.RunMetadata.FromString(md.SerializeToString())
                text = timeline.Timeline(fresh.step_stats).generate_chrome_trace_format(
                    show_dataflow=bool(dataflow), show_memory=bool(memory))
                (out_dir / f"{name}.tf.{dataflow}.{memory}.json").write_text(text)
        fresh = tf1.RunMetadata.FromString(md.SerializeToString())
        (out_dir / f"{name}.ctf.json").write_text(
            timeline.Timeline(fresh.step_stats).generate_chrome_trace_format(show_memory=True))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
