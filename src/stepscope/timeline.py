"""TensorFlow's ``timeline`` module without TensorFlow: step stats to a Chrome trace.

Older TensorFlow programs profile one ``session.run`` with
``RunOptions(trace_level=FULL_TRACE)`` and draw its ``RunMetadata`` with
``timeline.Timeline(run_metadata.step_stats).generate_chrome_trace_format()``. The same call
works here, on the message, its serialized bytes, or a ``.pb``/``.pbtxt`` file::

    from stepscope.timeline import Timeline
    trace_json = Timeline("run_metadata.pb").generate_chrome_trace_format(show_memory=True)

The trace holds what TensorFlow's would (see ``formats.step_stats_to_chrome_trace``);
``stepscope report``/``ops``/``serve`` open such files (and TensorFlow's ``ctf.json``) as
profiles of one step.
"""

from __future__ import annotations

from stepscope.formats.step_stats_reader import read_step_stats
from stepscope.formats.step_stats_to_chrome_trace import Timeline

__all__ = ["Timeline", "read_step_stats"]
