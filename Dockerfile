# syntax=docker/dockerfile:1
# The images for users without Nix, installed from the same requirements.lock as the flake
# (docs/nix.md). Two targets:
#   docker build -t ghcr.io/example/nightly-e2e:0.1.0 .                       # code location (last stage)
#   docker build --target test-pod --build-arg FRAMEWORK_IMAGE=NAME@sha256:... \
#                -t ghcr.io/example/rl-framework-nightly-e2e:nightly .         # framework image + pipelines
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG FRAMEWORK_IMAGE=ghcr.io/example/rl-framework@sha256:4f1c3a9e2b7d6c5a8e0f1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60

# ---- build: a virtualenv with exactly the pinned packages, then this project without deps.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 UV_NO_CACHE=1
RUN python -m pip install uv==0.13.9
WORKDIR /src
COPY requirements.lock build-constraints.lock pyproject.toml README.md ./
RUN python -m venv /opt/venv \
 && uv pip install --python /opt/venv/bin/python -r requirements.lock
COPY pipelines ./pipelines
COPY assets ./assets
COPY examples ./examples
COPY workspace.yaml ./
# pipelines/ looks for assets/, examples/ and workspace.yaml next to itself, in the venv's site-packages
# (PYTHON_IMAGE decides the python3.N in its path, so it is found, not written out); dagster_pipes is
# staged in /src/wrapper for the test-pod stage, whose COPY cannot look.
RUN uv pip install --python /opt/venv/bin/python --no-deps --build-constraint build-constraints.lock . \
 && site="$(echo /opt/venv/lib/python3.*/site-packages)" \
 && cp -r assets examples workspace.yaml "$site"/ \
 && mkdir -p wrapper && cp -r "$site"/dagster_pipes wrapper/

# ---- test-pod: the framework's image plus the pipelines package for the in-pod wrapper,
# which runs on the framework's own Python (standard library + dagster-pipes only).
FROM ${FRAMEWORK_IMAGE} AS test-pod
COPY --from=build /src/pipelines /opt/nightly-e2e/pipelines
COPY --from=build /src/wrapper/dagster_pipes /opt/nightly-e2e/dagster_pipes
ENV PYTHONPATH=/opt/nightly-e2e${PYTHONPATH:+:${PYTHONPATH}}

# ---- code-location (default): the Dagster code location, as a non-root user.
FROM ${PYTHON_IMAGE} AS code-location
RUN useradd --system --uid 10001 --create-home --home-dir /home/nightly nightly
COPY --from=build /opt/venv /opt/venv
# NIGHTLY_HOME under /tmp, as in the Nix image: the Deployment's root filesystem is read-only and
# only /tmp and DAGSTER_HOME are writable (k8s/base/code-location.yaml)
ENV PATH=/opt/venv/bin:${PATH} \
    NIGHTLY_HOME=/tmp/nightly \
    NIGHTLY_DEPLOYMENT=production
USER 10001
WORKDIR /home/nightly
EXPOSE 4000
CMD ["dagster", "api", "grpc", "-m", "pipelines.definitions", "-h", "0.0.0.0", "-p", "4000"]
