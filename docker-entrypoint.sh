#!/bin/sh
# The image's entrypoint (under tini): creates the workspace ($ODF_WORKSPACE, /ws) on first start,
# then runs `odf` with the container's arguments (default: `node run ...`, see the Dockerfile).
set -eu
mkdir -p "${ODF_WORKSPACE:-/ws}"
odf init --exist-ok >/dev/null
exec odf "$@"
