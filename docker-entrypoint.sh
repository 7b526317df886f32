#!/bin/sh
# Creates the workspace on first start, then runs `odf` with the given arguments.
set -e
mkdir -p "${ODF_WORKSPACE:-/ws}"
odf init --exist-ok >/dev/null
exec odf "$@"
