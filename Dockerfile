# odf-node image: a node daemon (`odf node run`) with Java for the Spark engine.
#   docker build -t odf-node .
#   docker run --rm -p 4001:4001 -p 8080:8080 -v "$PWD/ws:/ws" odf-node
#   docker run --rm -v "$PWD/ws:/ws" odf-node list        # any other odf command
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
COPY docker-entrypoint.sh /usr/local/bin/

# Workspaces live under /ws by default; mount a volume there.
ENV ODF_WORKSPACE=/ws
VOLUME ["/ws"]
# Push ingest over HTTP has no authentication, so the image turns it off (--no-ingest).
EXPOSE 4001 8080
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["node", "run", "--listen", "/ip4/0.0.0.0/tcp/4001", "--http-host", "0.0.0.0", "--http-port", "8080", "--no-ingest"]
