#!/usr/bin/env bash
# Debian packages the tests use, installed only when missing: Chromium (UI checks),
# Nix (flake evaluation), PostgreSQL (Dagster production storage), kubectl (kustomize).
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v nix-instantiate >/dev/null 2>&1 || need+=(nix-bin)
command -v kubectl >/dev/null 2>&1 || need+=(kubernetes-client)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "system-deps: installing ${need[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
