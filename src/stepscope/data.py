"""Input-pipeline instrumentation for any Python data pipeline.

``instrument(iterable)`` turns any iterable (a generator, a list, a file reader) into a
pipeline source whose stages chain as in tf.data::

    from stepscope import data
    pipe = data.instrument(read_records(), "Read").map(decode).batch(32).prefetch(2)
    for batch in pipe: ...

While a session records, each stage's ``next`` becomes an iterator event named after the
chain of its consumers (``Iterator::Prefetch::Batch::Map::Read``), which the input pipeline
analyzer (``stepscope input``) reads. Wrapping a plain generator that itself reads an
instrumented stage works too: the inner stage names itself after the outer one at run time.
PyTorch's ``DataLoader`` needs nothing: a session instruments it (and its worker processes).
"""

from __future__ import annotations

from stepscope.capture.input_pipeline import Stage, instrument

__all__ = ["Stage", "instrument"]
