"""Well-known names shared with TensorFlow/XProf profiles: planes, lines and stats.

Every other module refers to these constants rather than spelling the strings again, so that
what we write and what we read agree with each other and with XProf.
"""

from __future__ import annotations

# Planes.
HOST_PLANE = "/host:CPU"
PYTHON_TRACER_PLANE = "/host:python-tracer"
PYTHON_SAMPLER_PLANE = "/host:python-sampler"  # stepscope's own: Python stacks sampled
TASK_ENV_PLANE = "Task Environment"
# Planes the trace viewer does not draw (the capture's environment: stats, not events).
UNDRAWN_PLANES = (TASK_ENV_PLANE,)
COUNTERS_PLANE = "/host:stepscope-counters"
GPU_PLANE_PREFIX = "/device:GPU:"

# Plane ids as TensorFlow assigns them for host planes (device planes count from 1).
HOST_PLANE_ID = 0
TASK_ENV_PLANE_ID = 1000
PYTHON_TRACER_PLANE_ID = 1001
COUNTERS_PLANE_ID = 1002
PYTHON_SAMPLER_PLANE_ID = 1003

# Stats on events (as TraceMe metadata `name#key=value#` becomes stats).
STEP_NUM = "step_num"
ROOT_LEVEL = "_r"
GROUP_ID = "group_id"
CORRELATION_ID = "correlation_id"
VALUE = "value"  # a counter sample's value
PYTHON_STACK = "python_stack"  # a Python sample's stack: frame names, root first, one a line

# Stats on the Task Environment plane.
# Stepscope's own stat on an XSpace table's first device plane: the framework op (HLO
# metadata ``op_name``, "" where the HLO gives none) of each HLO instruction the device events
# name, as JSON {program id: {instruction: op name}}, from the file's HLO protos.
HLO_OP_NAMES = "stepscope_hlo_op_names"
# Beside it, the HLO metadata's ``op_type`` of those instructions that have one, in the same
# form (JAX leaves it empty; TensorFlow's XLA bridge names the TensorFlow op type).
HLO_OP_TYPES = "stepscope_hlo_op_types"
# Stepscope's own stat on a device plane whose event metadata describe XLA ops (TPU): JSON
# {event name: [display name, tf_op, program id, symbol id]}, facts the events do not carry.
XLA_OP_METADATA = "stepscope_xla_op_metadata"
ENV_PROFILE_START_TIME = "profile_start_time"
ENV_PROFILE_STOP_TIME = "profile_stop_time"
ENV_DROPPED_EVENTS = "stepscope_dropped_events"
# When the event cap was reached (ns since the epoch, as event times): what ended later is lost.
ENV_DROPPED_AFTER = "stepscope_dropped_after_ns"
ENV_RECORDED_EVENTS = "stepscope_recorded_events"
ENV_MAX_EVENTS = "stepscope_max_events"
ENV_REPLACED_VALUES = "stepscope_replaced_values"  # names/values not writable as UTF-8 text
ENV_OPTION_PREFIX = "stepscope_option_"
ENV_PRODUCER = "stepscope_version"
# A flight recorder's dump (capture.flight): what triggered it and the step's figures.
ENV_FLIGHT_TRIGGER = "stepscope_flight_trigger"  # slow_step, exception, sigterm, signal, ...
ENV_FLIGHT_DETAIL = "stepscope_flight_detail"  # one line: the exception, the signal, the call
ENV_FLIGHT_STEP = "stepscope_flight_step"  # the trigger's step number (-1: none)
ENV_FLIGHT_STEP_MS = "stepscope_flight_step_ms"  # that step's time
ENV_FLIGHT_MEDIAN_MS = "stepscope_flight_median_ms"  # the rolling median it was judged by
ENV_FLIGHT_THRESHOLD_MS = "stepscope_flight_threshold_ms"  # the time it exceeded
ENV_FLIGHT_WINDOW = "stepscope_flight_window"  # what the ring holds: "steps=N" or "seconds=S"
ENV_FLIGHT_AFTER_STEPS = "stepscope_flight_after_steps"  # steps recorded after the trigger
ENV_FLIGHT_MAX_BYTES = "stepscope_flight_max_bytes"  # the ring's memory bound
ENV_FLIGHT_STAT_PREFIX = "stepscope_flight_"
ENV_SAMPLER_TICKS = "stepscope_python_sampler_ticks"  # times the Python sampler sampled
ENV_SAMPLER_CPU_NS = "stepscope_python_sampler_cpu_ns"  # CPU time its thread took

# Counter lines on the counters plane.
COUNTER_PROCESS_CPU = "Process CPU (%)"
COUNTER_PROCESS_RSS = "Process RSS (bytes)"
COUNTER_SYSTEM_MEMORY_USED = "System memory used (bytes)"
COUNTER_SYSTEM_MEMORY_AVAILABLE = "System memory available (bytes)"
COUNTER_GPU_UTILIZATION = "GPU {index} utilization (%)"
COUNTER_GPU_MEMORY_USED = "GPU {index} memory used (bytes)"

# Layout of a TensorBoard profile logdir.
PLUGIN_DIR = ("plugins", "profile")
XPLANE_SUFFIX = ".xplane.pb"
RUN_NAME_FORMAT = "%Y_%m_%d_%H_%M_%S"

# Profiles converted from PyTorch's Kineto Chrome-trace JSON.
KINETO_CATEGORY = "kineto_category"  # event stat: the trace event's "cat" (cpu_op, kernel, ...)
ENV_SOURCE_FORMAT = "source_format"  # Task Environment stat: "xspace" or "kineto"
ENV_DEVICE_PROPERTIES = "device_properties"  # JSON text of Kineto's deviceProperties
ENV_RANK = "rank"
ENV_WORLD_SIZE = "world_size"
ENV_CPU_COUNT = "cpu_count"  # logical cores of the profiled machine, where known

# Memory activity, as TensorFlow and JAX write it (host events with these names and stats).
MEMORY_ALLOCATION = "MemoryAllocation"
MEMORY_DEALLOCATION = "MemoryDeallocation"
# The line stepscope gives each PyTorch DataLoader worker process's events (another process:
# its time is not the profiled process's own).
DATALOADER_WORKER_LINE = "DataLoader worker {worker}"
DATALOADER_WORKER_LINE_PREFIX = "DataLoader worker "
ALLOCATOR_NAME = "allocator_name"
INDEX_ON_HOST = "index_on_host"  # names the allocator where allocator_name is absent (TPU)
DEVICE_ORDINAL = "device_ordinal"
BYTES_RESERVED = "bytes_reserved"  # XProf reads it as the stack reserved
BYTES_ALLOCATED = "bytes_allocated"  # heap in use after the event
BYTES_AVAILABLE = "bytes_available"
FRAGMENTATION = "fragmentation"
PEAK_BYTES_IN_USE = "peak_bytes_in_use"
REQUESTED_BYTES = "requested_bytes"
ALLOCATION_BYTES = "allocation_bytes"
ADDRESS = "addr"
TF_OP = "tf_op"
REGION_TYPE = "region_type"
DATA_TYPE = "data_type"  # TensorFlow's DataType enum value
TENSOR_SHAPES = "shape"

# PyTorch's memory instants (Kineto "[memory]" events) and their arguments.
KINETO_MEMORY = "[memory]"
KINETO_BYTES = "Bytes"  # signed: positive for an allocation, negative for a free
KINETO_TOTAL_ALLOCATED = "Total Allocated"
KINETO_TOTAL_RESERVED = "Total Reserved"
KINETO_DEVICE_TYPE = "Device Type"
KINETO_DEVICE_ID = "Device Id"
KINETO_ADDRESS = "Addr"
# stepscope's PyTorch bridge: the data type of the tensor a memory record holds ("float32"),
# with its shape in ``TENSOR_SHAPES``; PyTorch's own trace files have neither.
KINETO_DATA_TYPE = "Data Type"

# Host event stat set by stepscope's XSpace framework bridges (TensorFlow, JAX): the framework
# whose profiler recorded the event ("tensorflow", "jax").
BRIDGE = "stepscope_bridge"

# The allocator stepscope's own capture records (NumPy array data, see capture.memory_tracer).
STEPSCOPE_ALLOCATOR = "numpy"

# Plane stat set by the readers: events of the plane whose duration was negative (bad data),
# read as zero-length.
NEGATIVE_DURATIONS = "stepscope_negative_durations"
# StepStats allocation records whose time (0, 1, or a day away from their op) was replaced by
# their op's start.
REPLACED_ALLOCATION_TIMES = "stepscope_replaced_allocation_times"
