#!/usr/bin/env bash
# Builds Shardgate and the benchmark; starts Shardgate on a fresh data
# directory on a free loopback port; runs the aggregation workloads, each in
# its own shardgate-bench run so that one failing does not stop the other;
# stops the server; prints the report:
#
#   1. agg-group: DOCS (1,000,000) documents of about 150 bytes ({_id, k,
#      cat, v, pad}: `k` the shard key with distinct values, `cat` 100
#      values, `v` a random int) loaded with parallel insertMany into
#      bench.agg_sharded (sharded on {k: "hashed"} over 16 partitions) and
#      bench.agg_plain (unsharded); then
#      aggregate([{$match: {v: {$gte: 0}}}, {$group: {_id: "$cat",
#      n: {$sum: 1}, total: {$sum: "$v"}}}]) at concurrency 1 and each
#      CONCURRENCY level, on the sharded and then the unsharded collection:
#      ops/s, p50, p99 and Shardgate's CPU cores during the run. Every answer
#      is checked (100 groups with the right counts and sums, counts adding
#      up to DOCS); RESULT workload=agg-group-ratio gives sharded / unsharded;
#   2. agg-topk: aggregate([{$sort: {v: -1}}, {$limit: 10}]) over the same
#      two collections (reused, not loaded again), checked against the ten
#      documents with the largest v;
#   3. agg-window (only when asked for): $setWindowFields with a running
#      sum of v per cat (sorted by v, documents window [unbounded,
#      current]), then $group by cat, allowDiskUse, over the same two
#      collections; each group's count and largest running sum are checked
#      against the documents.
#
# About 5 minutes in all with the defaults on two cores (plus the build).
#
#   bench/run-aggregate.sh                                  # defaults, see below
#   DOCS=200000 DURATION=5 bench/run-aggregate.sh           # a quick look
#   bench/run-aggregate.sh --workloads agg-topk             # only that one
#
# --workloads LIST (any of agg-group, agg-topk, agg-window) picks the workloads; the
# script takes it out of the arguments. The other extra arguments go to
# every shardgate-bench run and win over the script's defaults (e.g.
# --warmup, --agg-partitions, --batch for the load).
# Environment: DOCS (documents in each collection, 1000000), CONCURRENCY
# (levels, 1,4; concurrency 1 is always measured), DURATION (seconds per
# timed run, 15, after WARMUP seconds of untimed warm-up, 2),
# SHARDGATE_PORT (default: a free port), SHARDGATE_BIN (the server binary;
# when set, the server is not built), SERVER_ARGS (extra server flags), LOG
# (where the output is also written), SKIP_BUILD=1 (build nothing, use the
# binaries already built). CARGO_TARGET_DIR is honoured.
#
# Exits non-zero when any workload failed (after running the rest).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
shardgate_bin="${SHARDGATE_BIN:-$target_dir/release/shardgate}"
bench_bin="$target_dir/release/shardgate-bench"
docs="${DOCS:-1000000}"
concurrency="${CONCURRENCY:-1,4}"
duration="${DURATION:-15}"
warmup="${WARMUP:-2}"
log="${LOG:-/tmp/shardgate-aggregate-$(date +%Y%m%d-%H%M%S).log}"
read -r -a server_args <<<"${SERVER_ARGS:-}"

# shellcheck source=bench/servers.sh
source "$repo/bench/servers.sh"
# agg-group first: it loads the collections agg-topk then reuses.
pick_workloads "agg-group agg-topk agg-window" "agg-group,agg-topk" "$@"
set -- ${rest[@]+"${rest[@]}"}

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

data_dir="$(mktemp -d /tmp/sgagg-data.XXXXXX)"
server_log="$data_dir.server.log"
trap stop_servers EXIT

echo "== starting shardgate on 127.0.0.1:$shardgate_port, data in $data_dir, log in $server_log"
"$shardgate_bin" --bind "127.0.0.1:$shardgate_port" --data-dir "$data_dir" \
    --log-level warn ${server_args[@]+"${server_args[@]}"} >"$server_log" 2>&1 &
shardgate_pid=$!
pids+=("$shardgate_pid")
wait_for_port "$shardgate_port" shardgate "$shardgate_pid"

bench() {
    "$bench_bin" \
        --uri "mongodb://127.0.0.1:$shardgate_port/?directConnection=true" \
        --rss-pid "$shardgate_pid" \
        --server-pid "$shardgate_pid" \
        --agg-docs "$docs" \
        --concurrency "$concurrency" \
        --duration "$duration" \
        --warmup "$warmup" \
        "$@"
}

: >"$log"
failed=()
for w in "${run[@]}"; do
    echo "== $w (output also in $log)"
    # The script's arguments come last, so they win.
    if ! bench --workloads "$w" "$@" 2>&1 | tee -a "$log"; then
        failed+=("$w")
        echo "== $w failed" | tee -a "$log"
    fi
    echo
done

echo "== report"
grep -E '^(RESULT .*workload=agg-|SETUP |RSS pid=[0-9]+ after=end |  (warning|first error))' "$log" || true
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "failed: ${failed[*]} (see $log and $server_log)" >&2
    exit 1
fi
