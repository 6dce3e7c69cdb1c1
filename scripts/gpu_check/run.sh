#!/bin/bash
# The GPU check: PyTorch, JAX and CuPy (CUDA bridge) runs captured by stepscope on a real GPU,
# each checked against its own reference (compare.py), and the profiles kept.
# Usage, from the repository root on a GPU machine: bash scripts/gpu_check/run.sh OUTDIR
# Wheels missing there (cupti-python, universal-pathlib) may be put in .whl/ beforehand.
set -u
out=${1:?usage: run.sh OUTDIR}
work=/tmp/gpu_check
rm -rf "$work" && mkdir -p "$work" "$out"
here=$(pwd)
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || echo "wheel install failed"
  export PYTHONPATH=/tmp/site:$here/src
else
  export PYTHONPATH=$here/src
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 --version
( time python3 setup.py -q build_ext --inplace -j 16 ) > "$work/build.log" 2>&1 \
  || echo "build failed (pure-Python twins will run)"; tail -4 "$work/build.log"
python3 -m stepscope doctor 2>&1 | tee "$work/doctor.txt" | head -40
run() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  echo "== $name"
  local t0; t0=$(date +%s%N)
  timeout "$limit" "$@" > "$work/$name.log" 2>&1; local rc=$?
  echo "   rc=$rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms"; tail -3 "$work/$name.log" | cut -c1-400
}
run torch 240 python3 scripts/gpu_check/torch_train.py "$work/torch-logs" "$work/torch.json"
run jax 240 python3 scripts/gpu_check/jax_train.py "$work/jax-logs" "$work/jax.json"
run cupy 180 python3 scripts/gpu_check/cupy_work.py "$work/cupy-logs" "$work/cupy.json"
run launcher 240 python3 -m stepscope profile --logdir "$work/launch-logs" -- \
  python3 scripts/gpu_check/torch_train.py "$work/unused" "$work/launch.json" --launcher
echo "== compare"
timeout 300 python3 scripts/gpu_check/compare.py "$work" 2>&1 | tee "$work/compare.txt"
echo "== CLI"
for p in torch-logs jax-logs cupy-logs; do
  for c in report kernels gpu memory xla; do
    echo "### $c $p" >> "$work/cli.txt"
    timeout 120 python3 -m stepscope "$c" "$work/$p" >> "$work/cli.txt" 2>&1
    echo "rc=$?" >> "$work/cli.txt"
  done
done
grep -c "^rc=0" "$work/cli.txt"; grep -B3 "^rc=[1-9]" "$work/cli.txt" | cut -c1-300 | head -40
python3 - <<'PY' > "$work/kineto_event.txt" 2>&1
import torch
print(torch.__version__, sorted(m for m in dir(torch._C._autograd._KinetoEvent) if not m.startswith("_")))
PY
tar czf "$out/gpu_check.tgz" -C "$work" . && ls -la "$out"
