# odf-node image: a node daemon (`odf node run`) with Java for the Spark engine.
#   docker build -t odf-node .
#   docker run --rm -p 4001:4001 -p 8080:8080 -v "$PWD/ws:/ws" odf-node
#   docker run --rm -v "$PWD/ws:/ws" odf-node list        # any other odf command
# BASE_IMAGE is any Debian bookworm image with python3 (>= 3.11) and its venv module: the official
# Python image by default; scripts/image passes a base it made with debootstrap (no registry needed).
ARG BASE_IMAGE=python:3.11-slim-bookworm

# Stage 1: the venv. Some dependencies build from source (libp2p's fastecdsa: C against GMP), so
# this stage has a compiler; only the venv goes on to the image.
FROM ${BASE_IMAGE} AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        gcc libc6-dev libgmp-dev python3-dev \
    && rm -rf /var/lib/apt/lists/*
# A CA bundle for pip, when PyPI is reached through a TLS-inspecting proxy: scripts/image mounts the
# host's bundle for the build steps and names it here. Unset, pip uses its own.
ARG PIP_CERT
# Its own venv: Debian's system Python refuses pip installs (PEP 668); the official image's Python
# works the same way in a venv.
ENV VIRTUAL_ENV=/opt/odf-node/venv
ENV PATH=/opt/odf-node/venv/bin:$PATH
RUN python3 -m venv "$VIRTUAL_ENV" && pip install --no-cache-dir -U pip
WORKDIR /opt/odf-node/src
# The dependencies first, in their own layer (installed with an empty project, which is then removed):
# a source change rebuilds only the layers below.
COPY pyproject.toml README.md ./
RUN pip install --no-cache-dir . && pip uninstall -y odf-node
COPY fbs ./fbs
COPY storage ./storage
COPY engine ./engine
COPY node ./node
COPY p2p ./p2p
RUN pip install --no-cache-dir --no-deps .

# Stage 2: the image.
FROM ${BASE_IMAGE}
# The JRE runs the Spark engine (transforms, `odf verify` replay); procps gives `ps` to the engine's
# process management; libgmp10 is fastecdsa's; tini is PID 1: it reaps children and forwards signals,
# so stopping the container is one SIGTERM to `odf`.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless procps libgmp10 tini \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/odf-node/venv /opt/odf-node/venv
ENV VIRTUAL_ENV=/opt/odf-node/venv
ENV PATH=/opt/odf-node/venv/bin:$PATH
COPY docker-entrypoint.sh /usr/local/bin/

# Workspaces live under /ws by default; mount a volume there.
ENV ODF_WORKSPACE=/ws
VOLUME ["/ws"]
# The HTTP API listens on every interface of the container; push ingest over HTTP is turned off
# (--no-ingest): the node publishes what `odf ingest` commits in its workspace. Every other HTTP
# write needs the node's token (/ws/.odf/p2p/http-token).
EXPOSE 4001 8080
ENTRYPOINT ["tini", "--", "docker-entrypoint.sh"]
CMD ["node", "run", "--listen", "/ip4/0.0.0.0/tcp/4001", "--http-host", "0.0.0.0", "--http-port", "8080", "--no-ingest"]
