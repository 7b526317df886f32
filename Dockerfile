# odf-node image: a node daemon (`odf node run`) with Java for the Spark engine.
#   docker build -t odf-node .
#   docker run --rm -p 4001:4001 -p 8080:8080 -v "$PWD/ws:/ws" odf-node
#   docker run --rm -v "$PWD/ws:/ws" odf-node list        # any other odf command
# BASE_IMAGE is any Debian bookworm image with python3 (>= 3.11) and its venv module: the official
# Python image by default; scripts/image passes a base it made with debootstrap (no registry needed).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# The JRE runs the Spark engine (transforms, `odf verify` replay); procps gives `ps` to the engine's
# process management; tini reaps children and forwards signals, so `podman/docker stop` is a clean
# SIGTERM to `odf node run`.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless procps tini \
    && rm -rf /var/lib/apt/lists/*

# The project lives in its own venv: Debian's system Python refuses pip installs (PEP 668), and the
# official Python image's works the same way in a venv.
ENV VIRTUAL_ENV=/opt/odf-node/venv
ENV PATH=/opt/odf-node/venv/bin:$PATH
RUN python3 -m venv "$VIRTUAL_ENV"

# A CA bundle for pip, when PyPI is reached through a TLS-inspecting proxy: scripts/image mounts the
# host's bundle for the build steps and names it here. Unset, pip uses its own.
ARG PIP_CERT

WORKDIR /opt/odf-node
# The dependencies first, in their own layer: a source change then rebuilds only the last layers.
COPY pyproject.toml README.md ./
RUN mkdir -p fbs storage engine node p2p \
    && pip install --no-cache-dir . \
    && pip uninstall -y odf-node
COPY fbs ./fbs
COPY storage ./storage
COPY engine ./engine
COPY node ./node
COPY p2p ./p2p
RUN pip install --no-cache-dir --no-deps . && rm -rf build *.egg-info
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
