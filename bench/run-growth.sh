#!/usr/bin/env bash
# Cost as the collection grows: for each size in SIZES, starts the ceiling
# and a Shardgate on a fresh data directory, loads that many documents of
# 1 KB (16 tenants), waits until the server is idle (the engine has
# finished compacting what the load wrote), warms the block cache with
# WARM seconds each of `scan` and `read`, then measures `read`, `update`
# and `scan` at concurrency 16 beside the ceiling, with both servers' CPU
# per operation and Shardgate's resident memory. Loopback only.
#
#   bench/run-growth.sh                               # 20,000, 1M and 10M, unsharded
#   SHARDED=1 bench/run-growth.sh                     # the same over 16 partitions
#   SIZES=20000,1000000 bench/run-growth.sh --cache-mb 256   # server flags after
#
# Ten million documents take about 10 GB on disk and, with the default
# cache, as much memory once warm; the load alone takes 3-4 minutes on two
# cores and the engine compacts for about as long after it.
#
# Environment: SIZES (20000,1000000,10000000), SHARDED=1 (the usertable
# sharded over 16 partitions on `tenant`), WARM (30), DURATION (5),
# SKIP_BUILD=1, SHARDGATE_BIN, CEILING_DIR, CEILING_TARGET_DIR, DATA_PARENT
# (where the data directories go, default /tmp). Extra arguments are
# Shardgate's flags.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ceiling_dir="${CEILING_DIR:-$repo/../shared/tools/ceiling}"
ceiling_target="${CEILING_TARGET_DIR:-/tmp/ceiling-target}"
bench="$repo/target/release/shardgate-bench"

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
    cargo build --release --manifest-path "$ceiling_dir/Cargo.toml" --target-dir "$ceiling_target"
    (cd "$repo" && cargo build --release --bin shardgate --bin shardgate-bench)
fi

# shellcheck source=bench/servers.sh
source "$repo/bench/servers.sh"
trap stop_servers EXIT

layout=()
[[ "${SHARDED:-}" == 1 ]] && layout=(--usertable-partitions 16)

# CPU ticks (user + system) the process has used.
ticks() {
    awk '{print $14 + $15}' "/proc/$1/stat"
}

# Waits until `pid` uses under a twentieth of a core over 5 s, at most
# 10 minutes.
wait_idle() {
    local pid=$1 hz before after
    hz=$(getconf CLK_TCK)
    for _ in $(seq 1 120); do
        before=$(ticks "$pid")
        sleep 5
        after=$(ticks "$pid")
        if ((after - before < hz / 4)); then
            return 0
        fi
    done
    echo "still busy after 10 minutes; measuring anyway" >&2
}

IFS=, read -r -a sizes <<<"${SIZES:-20000,1000000,10000000}"
for docs in "${sizes[@]}"; do
    ceiling_port=$(free_port)
    shardgate_port=$(free_port)
    data_dir="$(mktemp -d "${DATA_PARENT:-/tmp}/sggrowth-data.XXXXXX")"
    pids=()
    "$ceiling_target/release/ceiling" --host 127.0.0.1 --port "$ceiling_port" >/dev/null 2>&1 &
    ceiling_pid=$!
    pids+=("$ceiling_pid")
    "${SHARDGATE_BIN:-$repo/target/release/shardgate}" --bind "127.0.0.1:$shardgate_port" \
        --data-dir "$data_dir" --log-level warn "$@" >/tmp/shardgate-growth-server.log 2>&1 &
    shardgate_pid=$!
    pids+=("$shardgate_pid")
    wait_for_port "$ceiling_port" ceiling "$ceiling_pid"
    wait_for_port "$shardgate_port" shardgate "$shardgate_pid"
    uri="mongodb://127.0.0.1:$shardgate_port/?directConnection=true"
    common=(--docs "$docs" --tenants 16 --scan-limit 50 --concurrency 16 "${layout[@]}")

    echo "== $docs documents${SHARDED:+, sharded}: load"
    started=$SECONDS
    "$bench" --uri "$uri" "${common[@]}" --workloads load --duration 1 | grep '^RESULT'
    echo "SIZE docs=$docs load_secs=$((SECONDS - started))"
    wait_idle "$shardgate_pid"
    echo "SIZE docs=$docs idle_after_secs=$((SECONDS - started)) disk=$(du -sh "$data_dir" | cut -f1)"
    "$bench" --uri "$uri" "${common[@]}" --workloads scan,read --duration "${WARM:-30}" >/dev/null
    "$bench" --uri "$uri" --compare-uri "mongodb://127.0.0.1:$ceiling_port/?directConnection=true" \
        "${common[@]}" --workloads read,update,scan --duration "${DURATION:-5}" \
        --rss-pid "$shardgate_pid" --cost "shardgate=$shardgate_pid" --compare-cost "ceiling=$ceiling_pid" |
        grep -E '^(COST|RATIO|RSS)' | sed "s/^/docs=$docs /"
    stop_servers
done
