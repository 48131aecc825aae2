#!/usr/bin/env bash
# Builds Shardgate, the benchmark and the ceiling server; starts the ceiling
# and a Shardgate on a fresh data directory, each on a free loopback port;
# runs the sharded workloads; stops both servers; prints the report:
#
#   1. partitioned-read at 1, 8 and 64 partitions, alternating with the
#      ceiling at concurrency 1 and 16 (throughput spread across partition
#      counts, goal <= 10 %). All three collections are loaded first, the
#      server gets --settle-secs (5) to settle, then every count is measured
#      once per round for --rounds (3) rounds, each round starting one count
#      later (1,8,64 / 8,64,1 / 64,1,8); SPREAD and RATIO are medians over
#      the rounds, and runs last PREAD_DURATION (5) seconds. About 4 minutes
#      on two cores;
#   2. fanout-query over 1,000,000 documents in 16 partitions, Shardgate only,
#      at concurrency 1 and 4 (p50/p99, queries/s and Shardgate's CPU cores,
#      goal > 1.5). One such query takes about a second on two cores, so 16
#      in flight would each wait longer than a run lasts;
#   3. distribution of 100,000 distinct keys over 16 partitions, Shardgate
#      only (largest partition / mean, goal <= 1.15).
#
# About 6 minutes in all with the defaults on two cores (plus the build).
#
#   bench/run-partitions.sh                          # defaults, see below
#   DOCS=200000 bench/run-partitions.sh --duration 3 # a quick look
#   bench/run-partitions.sh --workloads partitioned-read   # only that one
#
# --workloads LIST (any of partitioned-read, fanout-query, distribution)
# picks the workloads to run; the script takes it out of the arguments.
# The other extra arguments go to both shardgate-bench runs (e.g. --duration,
# which also overrides PREAD_DURATION, --partitions, --rounds, --settle-secs,
# --docs for partitioned-read's data set, --fanout-partitions).
# Environment: DOCS (fanout-query's documents, 1000000), CONCURRENCY
# (partitioned-read's levels, 1,16), PREAD_DURATION (partitioned-read's
# seconds per run, 5), FANOUT_CONCURRENCY (fanout-query's, 1,4),
# CEILING=0 (no ceiling: partitioned-read runs on Shardgate alone),
# CEILING_DIR (the ceiling's sources, default ../shared/tools/ceiling beside
# the repository), CEILING_PORT and SHARDGATE_PORT (default: free ports),
# SHARDGATE_BIN (the server binary, default the one this script builds),
# SERVER_ARGS (extra server flags, e.g. "--fanout-parallelism 4"), LOG (where
# the output is also written), SKIP_BUILD=1 (use the binaries already built).
# CARGO_TARGET_DIR is honoured for Shardgate and the benchmark.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
shardgate_bin="${SHARDGATE_BIN:-$target_dir/release/shardgate}"
bench_bin="$target_dir/release/shardgate-bench"
ceiling_dir="${CEILING_DIR:-$repo/../shared/tools/ceiling}"
ceiling_target="${CEILING_TARGET_DIR:-/tmp/ceiling-target}"
use_ceiling="${CEILING:-1}"
docs="${DOCS:-1000000}"
concurrency="${CONCURRENCY:-1,16}"
pread_duration="${PREAD_DURATION:-5}"
fanout_concurrency="${FANOUT_CONCURRENCY:-1,4}"
log="${LOG:-/tmp/shardgate-partitions-$(date +%Y%m%d-%H%M%S).log}"
read -r -a server_args <<<"${SERVER_ARGS:-}"

# --workloads is the script's: it decides which of the two benchmark runs
# happen and what the second one runs.
workloads="partitioned-read,fanout-query,distribution"
rest=()
while [[ $# -gt 0 ]]; do
    case "$1" in
    --workloads)
        [[ $# -ge 2 ]] || { echo "--workloads needs a list" >&2; exit 2; }
        workloads="$2"
        shift 2
        ;;
    --workloads=*)
        workloads="${1#--workloads=}"
        shift
        ;;
    *)
        rest+=("$1")
        shift
        ;;
    esac
done
set -- ${rest[@]+"${rest[@]}"}
run_pread=0
later=()
IFS=, read -r -a wanted <<<"$workloads"
for w in ${wanted[@]+"${wanted[@]}"}; do
    case "$w" in
    partitioned-read) run_pread=1 ;;
    fanout-query | distribution) later+=("$w") ;;
    *)
        echo "unknown workload '$w': pick from partitioned-read, fanout-query, distribution" >&2
        exit 2
        ;;
    esac
done
if [[ "$run_pread" == 0 && ${#later[@]} == 0 ]]; then
    echo "--workloads names no workload" >&2
    exit 2
fi
# Only partitioned-read is compared with the ceiling.
if [[ "$run_pread" == 0 ]]; then
    use_ceiling=0
fi

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
    echo "== building (release)"
    if [[ "$use_ceiling" == 1 ]]; then
        cargo build --release --manifest-path "$ceiling_dir/Cargo.toml" --target-dir "$ceiling_target"
    fi
    (cd "$repo" && cargo build --release --bin shardgate --bin shardgate-bench)
fi

# shellcheck source=bench/servers.sh
source "$repo/bench/servers.sh"

shardgate_port="${SHARDGATE_PORT:-$(free_port)}"
ceiling_port="${CEILING_PORT:-$(free_port)}"
ports=("$shardgate_port")
if [[ "$use_ceiling" == 1 ]]; then
    ports+=("$ceiling_port")
fi
require_free "${ports[@]}"

data_dir="$(mktemp -d /tmp/sgpart-data.XXXXXX)"
server_log="$data_dir.server.log"
trap stop_servers EXIT

compare=()
if [[ "$use_ceiling" == 1 ]]; then
    echo "== starting the ceiling on 127.0.0.1:$ceiling_port"
    "$ceiling_target/release/ceiling" --host 127.0.0.1 --port "$ceiling_port" >/tmp/ceiling.log 2>&1 &
    ceiling_pid=$!
    pids+=("$ceiling_pid")
    wait_for_port "$ceiling_port" ceiling "$ceiling_pid"
    compare=(--compare-uri "mongodb://127.0.0.1:$ceiling_port/?directConnection=true")
fi
echo "== starting shardgate on 127.0.0.1:$shardgate_port, data in $data_dir, log in $server_log"
"$shardgate_bin" --bind "127.0.0.1:$shardgate_port" --data-dir "$data_dir" \
    --log-level warn "${server_args[@]}" >"$server_log" 2>&1 &
shardgate_pid=$!
pids+=("$shardgate_pid")
wait_for_port "$shardgate_port" shardgate "$shardgate_pid"

bench() {
    "$bench_bin" \
        --uri "mongodb://127.0.0.1:$shardgate_port/?directConnection=true" \
        --server-pid "$shardgate_pid" \
        --rss-pid "$shardgate_pid" \
        "$@"
}

: >"$log"
if [[ "$run_pread" == 1 ]]; then
    echo "== partitioned-read (output also in $log)"
    # --duration in the arguments comes later, so it wins.
    bench --workloads partitioned-read --concurrency "$concurrency" --duration "$pread_duration" \
        ${compare[@]+"${compare[@]}"} "$@" 2>&1 | tee -a "$log"
    echo
fi
if [[ ${#later[@]} -gt 0 ]]; then
    later_list="$(IFS=,; echo "${later[*]}")"
    echo "== $later_list (output also in $log)"
    bench --workloads "$later_list" --concurrency "$fanout_concurrency" \
        --fanout-docs "$docs" "$@" 2>&1 | tee -a "$log"
fi

echo
echo "== report"
grep -E '^(SPREAD|RATIO|CPU|DISTRIBUTION|RSS pid=[0-9]+ after=end) ' "$log" || true
