#!/usr/bin/env bash
# Builds Shardgate, the benchmark and the ceiling server; starts the ceiling
# and a Shardgate on a fresh data directory, both on free loopback ports;
# runs kind-insert: DOCS (200,000) measurements of about 160 bytes
# ({_id, m: {sensor}, t: date, v, pad}) inserted in batches of BATCH (100)
# into an ordinary, a capped (a quarter of the data fits, so most inserts
# also delete the oldest documents) and a time-series collection
# ({timeField: "t", metaField: "m"}, with its {m: 1, t: 1} index), each
# created fresh, at each CONCURRENCY level; the ordinary load also runs
# against the ceiling right after Shardgate's. Every load is checked by a
# count. Prints docs/s, latency per batch, each kind as a fraction of the
# ordinary collection and of the ceiling (RESULT workload=kind-insert-ratio
# and kind-insert-ceiling-ratio). About two minutes with the defaults on
# two cores (plus the build).
#
#   bench/run-kinds.sh                        # defaults
#   DOCS=50000 bench/run-kinds.sh             # a quick look
#
# Environment: DOCS, BATCH, CONCURRENCY (1,4), CEILING_DIR (the ceiling's
# sources, default ../shared/tools/ceiling beside the repository),
# SHARDGATE_BIN (another server build, e.g. for a before/after comparison),
# SERVER_ARGS (extra server flags), LOG (where the output is also written),
# SKIP_BUILD=1 (use the binaries already built). Extra arguments go to
# shardgate-bench. CARGO_TARGET_DIR is honoured.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
ceiling_dir="${CEILING_DIR:-$repo/../shared/tools/ceiling}"
ceiling_target="${CEILING_TARGET_DIR:-/tmp/ceiling-target}"
shardgate_bin="${SHARDGATE_BIN:-$target_dir/release/shardgate}"
docs="${DOCS:-200000}"
batch="${BATCH:-100}"
concurrency="${CONCURRENCY:-1,4}"
log="${LOG:-/tmp/shardgate-kinds-$(date +%Y%m%d-%H%M%S).log}"
read -r -a server_args <<<"${SERVER_ARGS:-}"

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
    echo "== building (release)"
    cargo build --release --manifest-path "$ceiling_dir/Cargo.toml" --target-dir "$ceiling_target"
    (cd "$repo" && cargo build --release -p shardgate --bin shardgate -p shardgate-bench --bin shardgate-bench)
fi

# shellcheck source=bench/servers.sh
source "$repo/bench/servers.sh"
ceiling_port="$(free_port)"
shardgate_port="$(free_port)"
require_free "$ceiling_port" "$shardgate_port"
data_dir="$(mktemp -d /tmp/sgkinds-data.XXXXXX)"
server_log="$data_dir.server.log"
trap stop_servers EXIT

echo "== starting the ceiling on 127.0.0.1:$ceiling_port"
"$ceiling_target/release/ceiling" --host 127.0.0.1 --port "$ceiling_port" >"$data_dir.ceiling.log" 2>&1 &
ceiling_pid=$!
pids+=("$ceiling_pid")
echo "== starting shardgate on 127.0.0.1:$shardgate_port, data in $data_dir, log in $server_log"
"$shardgate_bin" --bind "127.0.0.1:$shardgate_port" --data-dir "$data_dir" \
    --log-level warn ${server_args[@]+"${server_args[@]}"} >"$server_log" 2>&1 &
shardgate_pid=$!
pids+=("$shardgate_pid")
wait_for_port "$ceiling_port" ceiling "$ceiling_pid"
wait_for_port "$shardgate_port" shardgate "$shardgate_pid"

echo "== kind-insert (output also in $log)"
"$target_dir/release/shardgate-bench" \
    --uri "mongodb://127.0.0.1:$shardgate_port/?directConnection=true" \
    --compare-uri "mongodb://127.0.0.1:$ceiling_port/?directConnection=true" \
    --rss-pid "$shardgate_pid" \
    --workloads kind-insert \
    --kind-docs "$docs" --kind-batch "$batch" \
    --concurrency "$concurrency" \
    "$@" 2>&1 | tee "$log"

echo "== report"
grep -E '^(RESULT .*workload=kind-insert|  (warning|first error))' "$log" || true
