#!/usr/bin/env bash
# The image's entrypoint: the server as a container runs it, listening on
# every interface of the container, its data in the image's volume.
#
#   shardgate-start [FLAGS...]    (docker run IMAGE [FLAGS...])
#
# Each default is an environment variable the server reads itself, set
# here only when the container's environment has not set it:
#
#   SHARDGATE_BIND       0.0.0.0:27017   the wire port (the binary's default,
#                                        127.0.0.1, is unreachable from
#                                        outside the container)
#   SHARDGATE_HTTP_BIND  0.0.0.0:8088    /livez, /readyz, /metrics; the
#                                        health check asks this address
#   SHARDGATE_DATA_DIR   /data           the image's volume
#
# A flag given to the container beats them (`docker run IMAGE --backend
# postgres --postgres URL ...`), as every flag beats its variable; a key of
# a --config file does not, so set these three by variable or flag.
# SHARDGATE_BIN names the binary (default /usr/local/bin/shardgate).
#
# The server replaces this script (exec), so `docker stop`'s SIGTERM
# reaches it and it shuts down cleanly: it stops accepting, finishes the
# replies in flight and syncs storage.
set -euo pipefail

export SHARDGATE_BIND="${SHARDGATE_BIND:-0.0.0.0:27017}"
export SHARDGATE_HTTP_BIND="${SHARDGATE_HTTP_BIND:-0.0.0.0:8088}"
export SHARDGATE_DATA_DIR="${SHARDGATE_DATA_DIR:-/data}"
exec "${SHARDGATE_BIN:-/usr/local/bin/shardgate}" "$@"
