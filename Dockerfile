# odf-node image: the `odf` CLI with Java for the Spark engine.
#   docker build -t odf-node .
#   docker run --rm -v "$PWD/ws:/ws" -w /ws odf-node init
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/odf-node
COPY pyproject.toml README.md ./
COPY fbs ./fbs
COPY storage ./storage
COPY engine ./engine
COPY node ./node
COPY p2p ./p2p
RUN pip install --no-cache-dir .

# Workspaces live under /ws by default; mount a volume there.
ENV ODF_WORKSPACE=/ws
VOLUME ["/ws"]
ENTRYPOINT ["odf"]
CMD ["--help"]
