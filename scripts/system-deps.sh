#!/usr/bin/env bash
# Debian packages the project uses, installed only when missing: python3-venv (the virtualenv
# `make` creates), Chromium (UI checks), Nix (flake evaluation), PostgreSQL (Dagster production
# storage), kubectl (kustomize).
#
# kubectl comes from the Kubernetes project's apt repository (pkgs.k8s.io, minor KUBECTL_MINOR),
# not Debian's `kubernetes-client`: Debian 12 has kubectl 1.20, whose kustomize v2 cannot read
# k8s/ (`labels:` needs kustomize v4.1, kubectl 1.22). A kubectl older than 1.22 is replaced.
# `--dry-run` prints what would be installed and changes nothing.
set -euo pipefail
PY=${PY:-python3}
KUBECTL_MINOR=${KUBECTL_MINOR:-1.32}
MIN_KUBECTL_MINOR=22

# the client's minor version (20 for v1.20.2), empty when kubectl is missing or says nothing usable
kubectl_minor() {
  kubectl version --client -o json 2>/dev/null | sed -n 's/.*"gitVersion": *"v1\.\([0-9]*\).*/\1/p' | head -1
}

# a venv with pip: Debian's python3 creates one only with python3-venv (ensurepip's wheels)
venv_works() {
  local tmp
  tmp=$(mktemp -d)
  "$PY" -m venv "$tmp/v" >/dev/null 2>&1 && "$tmp/v/bin/python" -m pip --version >/dev/null 2>&1
  local ok=$?
  rm -rf "$tmp"
  return $ok
}

# major.minor of a python (empty when it does not run)
py_version() {
  "$1" -c 'import sys; print(sys.version)' 2>/dev/null | sed -n '1s/^\([0-9]*\.[0-9]*\).*/\1/p'
}

# Debian's package of PY's venv module: python3-venv for the system python3, python3.N-venv for
# another (deadsnakes' python3.11 on Ubuntu 22.04 needs python3.11-venv, which python3-venv is not)
venv_package() {
  local mine
  mine=$(py_version "$PY")
  if [ -z "$mine" ] || [ "$mine" = "$(py_version python3)" ]; then echo python3-venv; else echo "python${mine}-venv"; fi
}

need=()
kubectl_repo=""
# a PY that is not there is check-python.py's to explain (make's next step), not a package to install
if command -v "$PY" >/dev/null 2>&1; then
  venv_works || need+=("$(venv_package)")
fi
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v nix-instantiate >/dev/null 2>&1 || need+=(nix-bin)
minor=$(kubectl_minor || true)
if [ -z "$minor" ] || [ "$minor" -lt "$MIN_KUBECTL_MINOR" ]; then
  need+=(kubectl)
  kubectl_repo="https://pkgs.k8s.io/core:/stable:/v${KUBECTL_MINOR}/deb/"
fi
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "${1:-}" = "--dry-run" ]; then
  echo "system-deps: would install ${need[*]}${kubectl_repo:+ (kubectl from $kubectl_repo)}"
  exit 0
fi
echo "system-deps: installing ${need[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
if [ -n "$kubectl_repo" ]; then
  # the repository's signing key and source, as https://kubernetes.io/docs/tasks/tools/install-kubectl-linux/ says
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends ca-certificates curl gnupg >/dev/null
  $SUDO mkdir -p -m 755 /etc/apt/keyrings
  curl -fsSL "${kubectl_repo}Release.key" | $SUDO gpg --dearmor --yes -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg
  echo "deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] $kubectl_repo /" \
    | $SUDO tee /etc/apt/sources.list.d/kubernetes.list >/dev/null
  $SUDO apt-get remove -y -qq kubernetes-client >/dev/null 2>&1 || true  # Debian's old kubectl, if it is the one
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
