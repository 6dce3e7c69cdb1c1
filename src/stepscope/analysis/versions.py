"""The versions of what the analysis keeps in the on-disk cache, NumPy-free: a process that
only prints a kept answer (``run.kept``) names it without importing the analysis."""

from __future__ import annotations

# Bump when the model's content or its JSON form changes: cached models of an older layout
# are then never read back.
RUN_MODEL_VERSION = 22  # 7: flight; 8: steps found in words; 9: framework; 10: dropped; 11: Python;
# 12: ROCm copy/fill kernels of XSpace files in the kernel table; 13: MTIA device events, devices
# counted only where they ran something; 14: XLA kernels' ops from the HLO, as XProf; 15: model
# FLOPs per step from PyTorch op shapes; 16: op stats of XLA (GPU and TPU) and host tf_op stats
# as XProf's framework op stats; the steps' input time that copies to the device took
# (input_transfer_ns); 17: legacy timelines' memory records no op occurrences; 18: tables'
# code columns int16 where they fit; 19: tf.data's input-op categories by XProf's name rule
# (file readers; advance stages in their chain); 20: tf.data stages counted by XProf's self time
# in the input-op table and host breakdown (counted_ns); 21: stages' typical work a call
# (per_call_ns); 22: PyTorch host ops as key_averages() counts them (CUDA calls rows of their
# own, self redispatches folded), 16-bit precision from the launching op's input types, device
# names from the device planes, XLA GPU precision from the HLO

# Bump when the trace viewer's index layout changes: old cached indexes are then never read.
INDEX_VERSION = 3  # 3: table rows and positions int32 where they fit
