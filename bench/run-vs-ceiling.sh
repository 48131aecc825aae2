#!/usr/bin/env bash
# Builds Shardgate, the benchmark and the ceiling server; starts the ceiling
# and a Shardgate on a fresh data directory; runs every workload against both,
# alternating, at concurrency 1 and 16; stops both servers. Loopback only.
# Each timed run also prints both servers' CPU time per operation (`COST`
# lines), a steadier figure than throughput on a shared machine.
#
#   bench/run-vs-ceiling.sh                       # defaults, see below
#   bench/run-vs-ceiling.sh --docs 50000 --duration 5   # extra shardgate-bench flags
#
# Environment: CEILING_DIR (the ceiling's sources, default ../shared/tools/ceiling
# beside the repository), CEILING_PORT (27200), SHARDGATE_PORT (27300),
# CONCURRENCY (1,16), LOG (where the output is also written), SKIP_BUILD=1 (use
# the binaries already built), SHARDGATE_BIN (another server build, e.g. for a
# before/after comparison), URI_OPTIONS (appended to both servers' URIs, e.g.
# `&w=1&journal=false` for writes acknowledged before the journal sync),
# SHARDGATE_ARGS (extra server flags), SHARDGATE_LOG_LEVEL (the server's --log-level,
# default warn), AUTH_USER (start Shardgate with --auth, create this user with
# the password AUTH_PASSWORD, default the same, and role root through the
# localhost exception, and log every benchmark connection in as it with
# SCRAM-SHA-256; needs mongosh in node_modules).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ceiling_dir="${CEILING_DIR:-$repo/../shared/tools/ceiling}"
ceiling_port="${CEILING_PORT:-27200}"
shardgate_port="${SHARDGATE_PORT:-27300}"
concurrency="${CONCURRENCY:-1,16}"
ceiling_target="${CEILING_TARGET_DIR:-/tmp/ceiling-target}"
log="${LOG:-/tmp/shardgate-bench-$(date +%Y%m%d-%H%M%S).log}"

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
    echo "== building (release)"
    cargo build --release --manifest-path "$ceiling_dir/Cargo.toml" --target-dir "$ceiling_target"
    (cd "$repo" && cargo build --release --bin shardgate --bin shardgate-bench)
fi

# shellcheck source=bench/servers.sh
source "$repo/bench/servers.sh"
require_free "$ceiling_port" "$shardgate_port"
data_dir="$(mktemp -d /tmp/sgbench-data.XXXXXX)"
trap stop_servers EXIT

echo "== starting the ceiling on 127.0.0.1:$ceiling_port"
"$ceiling_target/release/ceiling" --host 127.0.0.1 --port "$ceiling_port" >/tmp/ceiling.log 2>&1 &
ceiling_pid=$!
pids+=("$ceiling_pid")
echo "== starting shardgate on 127.0.0.1:$shardgate_port, data in $data_dir"
"${SHARDGATE_BIN:-$repo/target/release/shardgate}" --bind "127.0.0.1:$shardgate_port" --data-dir "$data_dir" \
    --log-level "${SHARDGATE_LOG_LEVEL:-warn}" ${AUTH_USER:+--auth} ${SHARDGATE_ARGS:-} >/tmp/shardgate-bench-server.log 2>&1 &
shardgate_pid=$!
pids+=("$shardgate_pid")
wait_for_port "$ceiling_port" ceiling "$ceiling_pid"
wait_for_port "$shardgate_port" shardgate "$shardgate_pid"

credentials=""
if [[ -n "${AUTH_USER:-}" ]]; then
    password="${AUTH_PASSWORD:-$AUTH_USER}"
    echo "== creating user $AUTH_USER (root) through the localhost exception"
    "$repo/node_modules/.bin/mongosh" --quiet --norc \
        "mongodb://127.0.0.1:$shardgate_port/admin?directConnection=true" \
        --eval "db.createUser({user: '$AUTH_USER', pwd: '$password', roles: ['root']})" >/dev/null
    credentials="$AUTH_USER:$password@"
    auth_options="&authSource=admin&authMechanism=SCRAM-SHA-256"
fi

echo "== benchmark (output also in $log)"
"$repo/target/release/shardgate-bench" \
    --uri "mongodb://${credentials}127.0.0.1:$shardgate_port/?directConnection=true${URI_OPTIONS:-}${auth_options:-}" \
    --compare-uri "mongodb://127.0.0.1:$ceiling_port/?directConnection=true${URI_OPTIONS:-}" \
    --concurrency "$concurrency" \
    --rss-pid "$shardgate_pid" \
    --cost "shardgate=$shardgate_pid" --compare-cost "ceiling=$ceiling_pid" \
    "$@" 2>&1 | tee "$log"
