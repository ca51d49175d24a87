# syntax=docker/dockerfile:1
# The ElastiCo image: every service (elastico serve pricing|predictor|placer|nodeagent) and the
# scheduler loop (elastico schedule) from one wheel.
#
#   docker build -t elastico:0.1.0 .
#
# Three stages: "probe" builds grpc_health_probe (the exec health probe of the pods, which,
# unlike the kubelet's built-in grpc probe, can present a client certificate to an mTLS server);
# "build" compiles the wheel with the C++ extension and collects every dependency as a wheel;
# the final stage installs those wheels offline and holds no compiler, no pip cache, no source.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG GO_IMAGE=golang:1.24-bookworm

FROM ${GO_IMAGE} AS probe
# The Go module proxy and checksum database verify this pinned version.
ARG GRPC_HEALTH_PROBE_VERSION=v0.4.40
RUN CGO_ENABLED=0 GOBIN=/out go install \
        github.com/grpc-ecosystem/grpc-health-probe@${GRPC_HEALTH_PROBE_VERSION} \
    && /out/grpc-health-probe -version

FROM ${PYTHON_IMAGE} AS build
# g++ for the pybind11 extension; scikit-build-core fetches cmake and ninja as build wheels.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml CMakeLists.txt README.md ./
COPY native/ native/
COPY protos/ protos/
COPY elastico/ elastico/
COPY services/ services/
COPY data/ data/
# The project's wheel (C++ extension and generated elastico.v1 inside), then every runtime
# dependency (with the NVML extra for the node agent) as wheels for the offline install below.
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && pip wheel --no-cache-dir --wheel-dir /wheels "$(ls /wheels/elastico-*.whl)[nvml]"

FROM ${PYTHON_IMAGE}
# libgomp1: LightGBM's wheels link the OpenMP runtime but do not carry it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels "elastico[nvml]" \
    && python -c "import elastico._native, elastico.v1.pricing_pb2"
COPY --from=probe /out/grpc-health-probe /usr/local/bin/grpc_health_probe
# The root filesystem is mounted read-only in the cluster: no byte-code writes, and HOME on
# the /tmp emptyDir.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# A numeric non-root UID, so that runAsNonRoot can verify it without a passwd entry.  The node
# agent overrides it (runAsUser 0, justified in k8s/nodeagent.yaml).
USER 65532:65532
ENTRYPOINT ["elastico"]
CMD ["--help"]
