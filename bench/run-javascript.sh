#!/usr/bin/env bash
# Builds Shardgate and the benchmark; starts Shardgate on a fresh data
# directory on a free loopback port; runs the js-cost workload; stops the
# server; prints the report:
#
#   js-cost: DOCS (200,000) documents {_id, v} loaded into bench.js_cost
#   (unsharded); then, REPEATS (3) times each, back to back:
#   find({$where: "this.v >= 0"}) against find({$expr: {$gte: ["$v", 0]}}),
#   and aggregate([{$addFields: {w: {$function: {body: "function(v) {
#   return v * 2 }", args: ["$v"], lang: "js"}}}}, {$group: {_id: null,
#   s: {$sum: "$w"}}}]) against the same with {$multiply: ["$v", 2]}.
#   Every answer is checked. RESULT lines give each query's documents/s
#   and µs per document (the median run) and the JavaScript's extra µs
#   per document.
#
# About a minute with the defaults on two cores (plus the build).
#
#   bench/run-javascript.sh
#   DOCS=50000 REPEATS=1 bench/run-javascript.sh    # a quick look
#
# Extra arguments go to shardgate-bench and win over the script's defaults.
# Environment: DOCS, REPEATS, SHARDGATE_PORT (default: a free port),
# SHARDGATE_BIN (the server binary; when set, the server is not built),
# SERVER_ARGS (extra server flags), LOG (where the output is also written),
# SKIP_BUILD=1 (build nothing). CARGO_TARGET_DIR is honoured.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
shardgate_bin="${SHARDGATE_BIN:-$target_dir/release/shardgate}"
bench_bin="$target_dir/release/shardgate-bench"
docs="${DOCS:-200000}"
repeats="${REPEATS:-3}"
log="${LOG:-/tmp/shardgate-javascript-$(date +%Y%m%d-%H%M%S).log}"
read -r -a server_args <<<"${SERVER_ARGS:-}"

# shellcheck source=bench/servers.sh
source "$repo/bench/servers.sh"

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
    echo "== building (release)"
    if [[ -n "${SHARDGATE_BIN:-}" ]]; then
        (cd "$repo" && cargo build --release -p shardgate-bench --bin shardgate-bench)
    else
        (cd "$repo" && cargo build --release -p shardgate --bin shardgate -p shardgate-bench --bin shardgate-bench)
    fi
fi

shardgate_port="${SHARDGATE_PORT:-$(free_port)}"
require_free "$shardgate_port"

data_dir="$(mktemp -d /tmp/sgjs-data.XXXXXX)"
server_log="$data_dir.server.log"
trap stop_servers EXIT

echo "== starting shardgate on 127.0.0.1:$shardgate_port, data in $data_dir, log in $server_log"
"$shardgate_bin" --bind "127.0.0.1:$shardgate_port" --data-dir "$data_dir" \
    --log-level warn ${server_args[@]+"${server_args[@]}"} >"$server_log" 2>&1 &
shardgate_pid=$!
pids+=("$shardgate_pid")
wait_for_port "$shardgate_port" shardgate "$shardgate_pid"

: >"$log"
"$bench_bin" \
    --uri "mongodb://127.0.0.1:$shardgate_port/?directConnection=true" \
    --server-pid "$shardgate_pid" \
    --js-docs "$docs" \
    --js-repeats "$repeats" \
    --workloads js-cost \
    "$@" 2>&1 | tee -a "$log"

echo "== report"
grep -E '^RESULT workload=js-cost' "$log"
