#!/usr/bin/env bash
# Builds Shardgate and the benchmark; starts Shardgate on a fresh data
# directory on a free loopback port; runs the secondary-index workloads, each
# in its own shardgate-bench run so that one failing (say, a server without
# createIndexes) does not stop the others; stops the server; prints the
# report:
#
#   1. index-eq: DOCS (1,000,000) documents of about 200 bytes with 100,000
#      distinct `cat` values (about 10 documents each; a few values hold
#      none, and their queries count as misses), loaded with parallel
#      insertMany; find({cat: v}) at concurrency 1, 4 and 16 without an
#      index, then createIndexes {cat: 1} (build time), then the same
#      queries with it; RESULT workload=index-eq-ratio gives indexed /
#      unindexed ops/s. An unindexed query scans the whole collection (about
#      0.8 s on two cores), so those runs complete few queries: a query still
#      running one DURATION after its run ended is abandoned (an error);
#   2. index-range: the same collection with {score: 1},
#      find({score: {$gte: x}}).sort({score: 1}).limit(20), random x;
#   3. index-insert: INSERT_DOCS (200,000) documents in batches of 100 by
#      1 and then 4 (INSERT_CONCURRENCY) loaders into a fresh collection
#      with 0, 1 and 5 single-field secondary indexes.
#
# Every answer is checked against the known documents: a wrong one counts
# as an error. About 5 to 8 minutes in all with the defaults on two cores
# (plus the build).
#
#   bench/run-indexes.sh                                 # defaults, see below
#   DOCS=200000 INSERT_DOCS=50000 bench/run-indexes.sh --duration 3   # a quick look
#   bench/run-indexes.sh --workloads index-insert       # only that one
#   bench/run-indexes.sh --workloads index-eq --index-partitions 16   # fanned out
#
# --workloads LIST (any of index-eq, index-range, index-insert) picks the
# workloads; the script takes it out of the arguments. The other extra
# arguments go to every shardgate-bench run and win over the script's
# defaults (e.g. --duration, --warmup, --index-cats, --index-counts 0,1,3,5,
# --index-batch, --batch for the query collection's load, --index-partitions N
# to shard the query collection on {_id: "hashed"} over N partitions, so every
# query fans out and each partition reads the index).
# Environment: DOCS (index-eq/index-range documents, 1000000), CONCURRENCY
# (query levels, 1,4,16; concurrency 1 is always measured), INSERT_DOCS
# (index-insert documents per index count, 200000), INSERT_CONCURRENCY
# (index-insert loaders, 1,4; a list runs each), DURATION (seconds per timed
# query run after 1 s of warm-up, 20), SHARDGATE_PORT (default: a free port), SHARDGATE_BIN (the
# server binary, default the one this script builds), SERVER_ARGS (extra
# server flags), LOG (where the output is also written), SKIP_BUILD=1 (use
# the binaries already built). CARGO_TARGET_DIR is honoured.
#
# Exits non-zero when any workload failed (after running the rest).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
shardgate_bin="${SHARDGATE_BIN:-$target_dir/release/shardgate}"
bench_bin="$target_dir/release/shardgate-bench"
docs="${DOCS:-1000000}"
concurrency="${CONCURRENCY:-1,4,16}"
insert_docs="${INSERT_DOCS:-200000}"
insert_concurrency="${INSERT_CONCURRENCY:-1,4}"
duration="${DURATION:-20}"
log="${LOG:-/tmp/shardgate-indexes-$(date +%Y%m%d-%H%M%S).log}"
read -r -a server_args <<<"${SERVER_ARGS:-}"

# shellcheck source=bench/servers.sh
source "$repo/bench/servers.sh"
# In the order they build on each other, whatever order they were given in.
pick_workloads "index-eq index-range index-insert" "index-eq,index-range,index-insert" "$@"
set -- ${rest[@]+"${rest[@]}"}

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
    echo "== building (release)"
    (cd "$repo" && cargo build --release -p shardgate --bin shardgate -p shardgate-bench --bin shardgate-bench)
fi


shardgate_port="${SHARDGATE_PORT:-$(free_port)}"
require_free "$shardgate_port"

data_dir="$(mktemp -d /tmp/sgidx-data.XXXXXX)"
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
        --index-docs "$docs" \
        --index-insert-docs "$insert_docs" \
        --duration "$duration" \
        "$@"
}

: >"$log"
failed=()
for w in "${run[@]}"; do
    if [[ "$w" == index-insert ]]; then
        levels="$insert_concurrency"
    else
        levels="$concurrency"
    fi
    echo "== $w (output also in $log)"
    # The script's arguments come last, so they win.
    if ! bench --workloads "$w" --concurrency "$levels" "$@" 2>&1 | tee -a "$log"; then
        failed+=("$w")
        echo "== $w failed" | tee -a "$log"
    fi
    echo
done

echo "== report"
grep -E '^(RESULT .*workload=index-|SETUP |RSS pid=[0-9]+ after=end |  (warning|first error))' "$log" || true
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "failed: ${failed[*]} (see $log and $server_log)" >&2
    exit 1
fi
