#!/usr/bin/env bash
# Point reads, durable updates and a fan-out query through Shardgate's
# backends, back to back in one run, each beside the ceiling measured in the
# same run, with the CPU each operation costs:
#
#   1. embedded       shardgate --data-dir (the default backend);
#   2. postgres1      shardgate --backend postgres on a fleet of 1 PostgreSQL server;
#   3. postgres3      the same on a fleet of 3 servers;
#   4. postgres1-2gw  two gateways in front of 1 server, the driver spreading
#                     operations over both (a mongos list);
#   5. postgres3-2gw  two gateways in front of 3 servers.
#
# Each fleet is started afresh by scripts/pg-fleet (fsync and synchronous
# commit on) and stopped after its runs. Every configuration loads the same
# data: DOCS documents of about 1 KB in `usertable`, sharded on
# {_id: "hashed"} over PARTITIONS partitions (read, update), and DOCS
# documents in `fanout`, sharded on {k: "hashed"} over PARTITIONS partitions
# (fanout-query). The workloads are shardgate-bench's read
# (find_one({_id})), update (update_one({_id}, {$set, $inc})) and
# fanout-query, at CONCURRENCY (and fanout-query also at 1).
#
# Cost per operation: the CPU time (user + system, from /proc) Shardgate,
# the PostgreSQL servers (each postmaster with all its backends and
# auxiliary processes) and the ceiling used during each timed run, divided
# by the operations it completed; with two gateways, `shardgate` is both.
#
# About 6 minutes on two cores for the first three (plus the build),
# loopback only.
#
#   bench/run-postgres.sh                     # defaults, see below
#   DOCS=5000 DURATION=2 bench/run-postgres.sh   # a quick look
#
# Extra arguments go to every shardgate-bench run. Environment: DOCS (20000),
# PARTITIONS (16), CONCURRENCY (16), DURATION (seconds per timed run, 5),
# CONFIGS (embedded,postgres1,postgres3,postgres1-2gw,postgres3-2gw), CEILING_DIR (the ceiling's sources,
# default ../shared/tools/ceiling beside the repository), CEILING_TARGET_DIR
# (/tmp/ceiling-target), SHARDGATE_BIN, LOG (where the output is also
# written), SKIP_BUILD=1 (use the binaries already built). CARGO_TARGET_DIR
# is honoured for Shardgate and the benchmark.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
shardgate_bin="${SHARDGATE_BIN:-$target_dir/release/shardgate}"
bench_bin="$target_dir/release/shardgate-bench"
ceiling_dir="${CEILING_DIR:-$repo/../shared/tools/ceiling}"
ceiling_target="${CEILING_TARGET_DIR:-/tmp/ceiling-target}"
docs="${DOCS:-20000}"
partitions="${PARTITIONS:-16}"
concurrency="${CONCURRENCY:-16}"
duration="${DURATION:-5}"
configs="${CONFIGS:-embedded,postgres1,postgres3,postgres1-2gw,postgres3-2gw}"
log="${LOG:-/tmp/shardgate-postgres-$(date +%Y%m%d-%H%M%S).log}"

IFS=, read -r -a config_list <<<"$configs"
for c in "${config_list[@]}"; do
    case "$c" in
    embedded | postgres1 | postgres3 | postgres1-2gw | postgres3-2gw) ;;
    *)
        echo "unknown configuration '$c': pick from embedded, postgres1, postgres3, postgres1-2gw, postgres3-2gw" >&2
        exit 2
        ;;
    esac
done

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
    echo "== building (release)"
    cargo build --release --manifest-path "$ceiling_dir/Cargo.toml" --target-dir "$ceiling_target"
    (cd "$repo" && cargo build --release -p shardgate -p shardgate-bench)
fi

# shellcheck source=bench/servers.sh
source "$repo/bench/servers.sh"

fleet_dir=""
stop_fleet() {
    if [[ -n "$fleet_dir" ]]; then
        "$repo/scripts/pg-fleet" stop "$fleet_dir" >/dev/null 2>&1 || true
        rm -rf "$fleet_dir"
        fleet_dir=""
    fi
}
cleanup() {
    stop_servers
    stop_fleet
}
trap cleanup EXIT

ceiling_port="$(free_port)"
require_free "$ceiling_port"
echo "== starting the ceiling on 127.0.0.1:$ceiling_port"
"$ceiling_target/release/ceiling" --host 127.0.0.1 --port "$ceiling_port" >/tmp/ceiling.log 2>&1 &
ceiling_pid=$!
pids+=("$ceiling_pid")
wait_for_port "$ceiling_port" ceiling "$ceiling_pid"

: >"$log"
echo "== load: $(uptime)" | tee -a "$log"
for config in "${config_list[@]}"; do
    backend=()
    pg_cost=()
    gateways=1
    if [[ "$config" == *-2gw ]]; then
        gateways=2
    fi
    case "$config" in
    embedded)
        data_dir="$(mktemp -d /tmp/sgpg-data.XXXXXX)"
        backend=(--data-dir "$data_dir")
        ;;
    postgres*)
        servers="${config#postgres}"
        servers="${servers%%-*}"
        fleet_dir="$(mktemp -d /tmp/sgpg-fleet.XXXXXX)"
        echo "== starting $servers PostgreSQL server(s) in $fleet_dir"
        "$repo/scripts/pg-fleet" start "$servers" "$fleet_dir" >/dev/null
        backend=(--backend postgres)
        while read -r url; do
            backend+=(--postgres "$url")
        done <"$fleet_dir/urls"
        postmasters=()
        for k in $(seq 0 $((servers - 1))); do
            postmasters+=("$(head -n 1 "$fleet_dir/pg$k/data/postmaster.pid")")
        done
        pg_cost=(--cost "postgres=$(IFS=,; echo "${postmasters[*]}")")
        ;;
    esac

    gateway_pids=()
    hosts=()
    for g in $(seq 1 "$gateways"); do
        port="$(free_port)"
        require_free "$port"
        echo "== $config: shardgate (gateway $g) on 127.0.0.1:$port"
        "$shardgate_bin" --bind "127.0.0.1:$port" "${backend[@]}" --log-level warn \
            >"/tmp/shardgate-$config-$g.log" 2>&1 &
        gateway_pids+=("$!")
        pids+=("$!")
        wait_for_port "$port" shardgate "$!"
        hosts+=("127.0.0.1:$port")
    done
    shardgate_pid="${gateway_pids[0]}"
    if [[ "$gateways" == 1 ]]; then
        uri="mongodb://${hosts[0]}/?directConnection=true"
    else
        uri="mongodb://$(IFS=,; echo "${hosts[*]}")/"
    fi

    "$bench_bin" \
        --uri "$uri" \
        --label "$config" \
        --compare-uri "mongodb://127.0.0.1:$ceiling_port/?directConnection=true" \
        --workloads load,read,update,fanout-query \
        --docs "$docs" --usertable-partitions "$partitions" \
        --fanout-docs "$docs" --fanout-partitions "$partitions" \
        --concurrency "$concurrency" --duration "$duration" --warmup 1 \
        --server-pid "$shardgate_pid" \
        --cost "shardgate=$(IFS=,; echo "${gateway_pids[*]}")" ${pg_cost[@]+"${pg_cost[@]}"} \
        --compare-cost "ceiling=$ceiling_pid" \
        "$@" 2>&1 | tee -a "$log"

    # This configuration's servers go before the next one starts, so the
    # next runs have the machine to themselves.
    for pid in "${gateway_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    pids=("$ceiling_pid")
    stop_fleet
    if [[ "$config" == embedded ]]; then
        rm -rf "$data_dir"
    fi
done
echo "== load: $(uptime)" | tee -a "$log"

# One row per configuration, workload and concurrency: throughput, its
# ratio to the ceiling's in the same run, and CPU µs per operation.
echo
echo "== report (output also in $log)"
awk '
function field(name,   i) {
    for (i = 1; i <= NF; i++) if (index($i, name "=") == 1) return substr($i, length(name) + 2)
    return ""
}
/^COST / {
    key = field("workload") " " field("conc")
    if (field("target") == "ceiling") {
        # The ceiling runs right after the backend, with the same key.
        if (key in last) { ceil_ops[last[key]] = field("ops_per_sec"); ceil_us[last[key]] = field("ceiling_us_per_op") }
        next
    }
    n++
    last[key] = n
    t[n] = field("target"); k[n] = key; ops[n] = field("ops_per_sec")
    sg[n] = field("shardgate_us_per_op"); pg[n] = field("postgres_us_per_op")
}
END {
    printf "%-13s %-13s %5s %10s %8s %13s %12s %12s %11s\n", "backend", "workload", "conc", "ops/s", "vs ceil", "shardgate us", "postgres us", "total us/op", "ceiling us"
    for (i = 1; i <= n; i++) {
        split(k[i], wk, " ")
        ratio = (ceil_ops[i] > 0) ? sprintf("%.3f", ops[i] / ceil_ops[i]) : "-"
        printf "%-13s %-13s %5s %10s %8s %13s %12s %12.1f %11s\n", t[i], wk[1], wk[2], ops[i], ratio, sg[i], (pg[i] == "" ? "-" : pg[i]), sg[i] + pg[i], (i in ceil_us ? ceil_us[i] : "-")
    }
}
' "$log" | tee -a "$log"
