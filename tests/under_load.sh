#!/usr/bin/env bash
# Run pytest with busy processes beside it, as on a loaded machine (a CI runner, a laptop
# building something else): every test must wait for final answers, never take a first one.
#
#   tests/under_load.sh [pytest arguments]      (default: the whole suite, -q)
#   STEPSCOPE_LOAD_PROCS=4 tests/under_load.sh tests/test_trace_ui.py
#
# STEPSCOPE_LOAD_PROCS busy processes (default 2: one per core of a 2-core runner) spin for
# the whole run and are ended, by their process ids, when pytest ends.
set -u
cd "$(dirname "$0")/.."
PYTEST="${PYTEST:-.venv/bin/python -m pytest}"
procs="${STEPSCOPE_LOAD_PROCS:-2}"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
}
trap cleanup EXIT INT TERM
for _ in $(seq "$procs"); do
  yes > /dev/null &
  pids+=("$!")
done
echo "under_load: ${#pids[@]} busy processes (${pids[*]}); load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)" >&2
if [ "$#" -eq 0 ]; then set -- -q; fi
$PYTEST "$@"
status=$?
echo "under_load: pytest exited $status; load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)" >&2
exit "$status"
