#!/usr/bin/env bash
# The image's HEALTHCHECK: healthy (exit 0) while the server's /readyz
# answers 200, that is once storage is open and the wire port accepts,
# until shutdown begins; unhealthy (exit 1) otherwise.
#
# It asks the address in SHARDGATE_HTTP_BIND (default 0.0.0.0:8088, as
# start.sh sets it; 0.0.0.0 and [::] are asked on loopback). Move the HTTP
# side port with that variable, not with a flag, so that this script
# follows it. With the side port off there is nothing to ask: the check
# fails and says so.
#
# The runtime image has no HTTP client; bash's /dev/tcp speaks the one
# request this needs.
set -euo pipefail

unhealthy() {
    echo "unhealthy: $*"
    exit 1
}

addr="${SHARDGATE_HTTP_BIND:-0.0.0.0:8088}"
[ "$addr" != off ] || unhealthy "the HTTP side port is off (SHARDGATE_HTTP_BIND=off): no /readyz to ask"
host="${addr%:*}"
port="${addr##*:}"
host="${host#[}"
host="${host%]}"
case "$host" in
0.0.0.0) host=127.0.0.1 ;;
::) host=::1 ;;
esac

# A peer that closes early makes a write fail instead of killing the check.
trap '' PIPE
# The braces keep bash's own "connection refused" off stderr; fd 3 stays open.
{ exec 3<>"/dev/tcp/$host/$port"; } 2>/dev/null ||
    unhealthy "nothing listens on $addr (the server is starting, stopped, or its HTTP side port could not bind)"
{ printf 'GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3; } 2>/dev/null ||
    unhealthy "$addr closed the connection before the request was sent"
status=""
IFS= read -r -t 5 status <&3 || true
status="${status%$'\r'}"
case "$status" in
"HTTP/1."?" 200 "*)
    echo "ready"
    exit 0
    ;;
"") unhealthy "no answer from /readyz on $addr (waited up to 5 s)" ;;
*) unhealthy "/readyz on $addr answered ${status#HTTP/1.? }" ;;
esac
