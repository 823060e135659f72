#!/usr/bin/env bash
# The docs' screenshot of the night report (docs/img/night-report.png), made by the project's own
# commands: two nights of the example into a scratch state folder, the second with an injected
# failure (test_sft_math) and hang (test_lora_math, killed at its 60 s timeout), then
# `nightly report --screenshot`. Needs Chromium (`make system-deps`). Takes a few minutes.
#
#   scripts/report-screenshot.sh [PNG]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/img/night-report.png}"
home="$(mktemp -d)"
trap 'rm -rf "$home"' EXIT
nightly=(.venv/bin/nightly)
"${nightly[@]}" run --home "$home" --timeout-floor 60 --accept-problems || true
"${nightly[@]}" run --home "$home" --timeout-floor 60 --accept-problems \
  --env MINIRL_FAIL=test_sft_math --env MINIRL_HANG=test_lora_math || true
"${nightly[@]}" report --home "$home" --screenshot "$out"
