"""How fast stepscope draws a legacy timeline, next to TensorFlow's own ``timeline`` module.

For real RunMetadata of increasing size (a ``tf.compat.v1.Session`` FULL_TRACE run of a graph
of about N nodes on CPU: parallel chains of small matmuls and adds), it prints side by side:

1. TensorFlow: ``timeline.Timeline(md.step_stats).generate_chrome_trace_format(...)`` on an
   already parsed RunMetadata (each run gets a fresh copy: TensorFlow's call writes lanes into
   the message);
2. stepscope: ``stepscope.timeline.Timeline(bytes).generate_chrome_trace_format(...)`` from
   the serialized bytes (its parse included);
3. stepscope, loading the file as a profile: ``load_file(path, use_cache=False)`` (step stats
   to an event table with ops, flows and memory events).

Both with ``show_memory=True, show_dataflow=True``; the median of ``--repeat`` runs (3) is
kept; ratios are stepscope's time over TensorFlow's (below 1: faster). A benchmark prints; it
never fails on a timing.

Run from the repository root::

    PYTHONPATH=src .venv/bin/python benchmarks/timeline.py              # 1,000, 10,000, 50,000 ops
    PYTHONPATH=src .venv/bin/python benchmarks/timeline.py --nodes 500  # one size
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (this checkout's sources first, for every process started)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def record(nodes: int) -> bytes:
    """Serialized RunMetadata of one FULL_TRACE run of a graph of about ``nodes`` nodes."""
    import numpy as np
    import tensorflow as tf

    tf1 = tf.compat.v1
    graph = tf1.Graph()
    chains = 8
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [16, 16], name="x")
        ends = []
        for c in range(chains):
            v = x
            for i in range(max(nodes // (2 * chains), 1)):
                v = tf.matmul(v, x, name=f"c{c}/mm{i}") * 0.5
            ends.append(v)
        total = tf.add_n(ends, name="total")
    config = tf1.ConfigProto(inter_op_parallelism_threads=2, intra_op_parallelism_threads=1)
    with tf1.Session(graph=graph, config=config) as sess:
        feed = {x: np.eye(16, dtype=np.float32)}
        sess.run(total, feed_dict=feed)
        md = tf1.RunMetadata()
        sess.run(total, feed_dict=feed, run_metadata=md,
                 options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE))
    data: bytes = md.SerializeToString()
    return data


def _tf_trace(tf_timeline: Any, config_pb2: Any, parsed: Any) -> str:
    fresh = config_pb2.RunMetadata()
    fresh.CopyFrom(parsed)  # TensorFlow's call writes lanes into the message it is given
    return str(tf_timeline.Timeline(fresh.step_stats).generate_chrome_trace_format(
        show_dataflow=True, show_memory=True))


def _our_trace(timeline_class: Any, data: bytes) -> str:
    return str(timeline_class(data).generate_chrome_trace_format(show_dataflow=True,
                                                                  show_memory=True))


def median_s(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, action="append",
                        help="graph size asked for, in ops (repeatable; default 1000, 10000, "
                        "50000; grappler fuses some: the table counts the nodes run)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.client import timeline as tf_timeline

    from stepscope.formats.run_reader import load_file
    from stepscope.timeline import Timeline

    print(f"{'nodes':>7} {'MB':>6} {'TF timeline s':>14} {'stepscope s':>12} {'ratio':>6} "
          f"{'load as profile s':>18}")
    for nodes in args.nodes or [1000, 10000, 50000]:
        data = record(nodes)
        parsed = config_pb2.RunMetadata.FromString(data)
        count = sum(len(d.node_stats) for d in parsed.step_stats.dev_stats)

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "run_metadata.pb"
            path.write_bytes(data)
            tf_s = median_s(partial(_tf_trace, tf_timeline, config_pb2, parsed), args.repeat)
            our_s = median_s(partial(_our_trace, Timeline, data), args.repeat)
            load_s = median_s(partial(load_file, path, use_cache=False), args.repeat)
        print(f"{count:>7} {len(data) / 1e6:>6.2f} {tf_s:>14.3f} {our_s:>12.3f} "
              f"{our_s / tf_s:>6.2f} {load_s:>18.3f}")


if __name__ == "__main__":
    main()
