#!/usr/bin/env bash
# The docs' screenshots of the Dagster UI's ways in (docs/img/ui-*.png), made by the project's own
# commands: one night of the example into a scratch state folder with an injected failure, then
# `nightly ui` (dagster dev) on it and headless Chromium on the pages docs/ui.md describes:
# the partitions of test_runs, the test_passed check, the runs, and the launchpad of a pick.
# Needs Chromium (`make system-deps`). Takes a few minutes.
#
#   scripts/ui-screenshots.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/img}"
home="$(mktemp -d)"
port="${NIGHTLY_UI_PORT:-3417}"
export NIGHTLY_HOME="$home" DAGSTER_HOME="$home/dagster"
.venv/bin/nightly run --home "$home" --accept-problems --env MINIRL_FAIL=test_sft_math || true
env --default-signal=INT,TERM setsid .venv/bin/nightly ui --port "$port" > "$home/ui.log" 2>&1 &
ui=$!
trap 'kill -TERM -- -$ui 2>/dev/null || true; sleep 2; rm -rf "$home"' EXIT
for _ in $(seq 1 300); do  # the UI answers after ~10 s idle, a few minutes on a loaded machine
  curl -fs "http://127.0.0.1:$port/server_info" >/dev/null 2>&1 && break
  sleep 1
done
shot() {  # shot NAME PATH
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$(mktemp -d)" --virtual-time-budget=20000 --window-size=1400,900 \
    --screenshot="$out/ui-$1.png" "http://127.0.0.1:$port$2" >/dev/null 2>&1
  echo "wrote $out/ui-$1.png"
}
shot partitions "/assets/test_runs?view=partitions"
shot checks "/assets/test_runs?view=checks"
shot runs "/runs"
shot automation "/automation"
