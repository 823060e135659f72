#!/usr/bin/env bash
# `make test` under a CPU load this script makes itself: CI runs the suite on a 2-CPU machine that
# may be busy with other work, and a red run does not land, so the suite must pass loaded too.
#
#   scripts/loaded-test.sh                 one loaded run (4 busy processes beside the suite)
#   scripts/loaded-test.sh --runs 3        three loaded runs in a row, stopping at the first red one
#   scripts/loaded-test.sh --workers 0     the same suite idle (the README's idle figure)
#   scripts/loaded-test.sh -- PYTEST_ARGS="-x"   anything after -- goes to `make test`
#
# The load is N Python busy loops (no package needed). Each one stops at the latest after
# --max-load-s seconds or when this script is gone, so a killed run leaves no load behind.
# Every run's output goes to the terminal and to .nightly/loaded-test/run-K.log; the last line
# gives the wall time of each run for the README's figures.
set -euo pipefail

workers=4
runs=1
max_load_s=7200
make_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --max-load-s) max_load_s="$2"; shift 2 ;;
    --) shift; make_args=("$@"); break ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "loaded-test: unknown argument '$1'; see --help" >&2; exit 2 ;;
  esac
done
for value in "$workers" "$runs" "$max_load_s"; do
  case "$value" in
    ''|*[!0-9]*) echo "loaded-test: '$value' is not a whole number; --workers, --runs and --max-load-s take one" >&2
                 exit 2 ;;
  esac
done

cd "$(dirname "$0")/.."
python=python3
if [ -x .venv/bin/python ]; then python=.venv/bin/python; fi
logs=.nightly/loaded-test
mkdir -p "$logs"

load_pids=()
stop_load() {
  for pid in "${load_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${load_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  load_pids=()
}
trap stop_load EXIT
trap 'stop_load; exit 130' INT TERM

# one busy loop per worker; it checks its parent so it never outlives this script
BUSY='
import os, sys, time
end, parent = time.monotonic() + float(sys.argv[1]), os.getppid()
while time.monotonic() < end and os.getppid() == parent:
    for _ in range(200_000):
        pass
'
for _ in $(seq 1 "$workers"); do
  "$python" -c "$BUSY" "$max_load_s" &
  load_pids+=($!)
done

label="with $workers busy processes"
if [ "$workers" = 0 ]; then label="idle (no extra load)"; fi
walls=()
for k in $(seq 1 "$runs"); do
  echo "loaded-test: run $k/$runs of make test $label (load average $(cut -d' ' -f1 /proc/loadavg))"
  start=$(date +%s)
  set +e
  make test "${make_args[@]}" 2>&1 | tee "$logs/run-$k.log"
  rc=${PIPESTATUS[0]}
  set -e
  wall=$(( $(date +%s) - start ))
  walls+=("${wall} s")
  if [ "$rc" != 0 ]; then
    echo "loaded-test: run $k/$runs FAILED (make exited $rc) after $wall s $label; log: $logs/run-$k.log"
    exit "$rc"
  fi
  echo "loaded-test: run $k/$runs passed in $wall s $label"
done
walls_text=$(IFS=,; echo "${walls[*]}" | sed 's/,/, /g')
echo "loaded-test: make test $label: $runs/$runs passed; wall time per run: $walls_text"
