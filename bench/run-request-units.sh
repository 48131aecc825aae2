#!/usr/bin/env bash
# Builds Shardgate and the benchmark and measures request units:
#
#   1. accounting cost: partitioned-read (find_one by _id on a collection
#      sharded on {_id: "hashed"} over PARTITIONS (128) partitions, DOCS
#      (100,000) documents of about 1 KB) at CONCURRENCY (16), on a server
#      whose collections are provisioned with --default-throughput 1000000
#      (7,812 RU/s per partition: nothing is throttled, every read is
#      charged and settled into its partition's bucket) and, alternately,
#      on the same build with nothing provisioned. The RATIO line gives
#      provisioned ÷ unprovisioned reads/s; the target is within 3%.
#   2. enforcement accuracy: ru-enforcement on a server started with
#      --default-throughput RU_THROUGHPUT (2000): for 1, 4 and 16
#      partitions, RU_CLIENTS (16) clients read 10 KB documents at random,
#      honouring RetryAfterMs; RESULT workload=ru-enforcement gives served
#      RU/s ÷ provisioned (1.0 is exact).
#
# About 3 minutes with the defaults on two cores (plus the build).
#
#   bench/run-request-units.sh
#   DURATION=5 bench/run-request-units.sh            # a quick look
#
# Extra arguments go to every shardgate-bench run and win over the
# script's defaults. Environment: DOCS, PARTITIONS, CONCURRENCY, DURATION
# (seconds per timed run, 10), RU_THROUGHPUT, RU_CLIENTS, SHARDGATE_BIN
# (the server binary; when set, the server is not built), LOG (where the
# output is also written), SKIP_BUILD=1. CARGO_TARGET_DIR is honoured.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
shardgate_bin="${SHARDGATE_BIN:-$target_dir/release/shardgate}"
bench_bin="$target_dir/release/shardgate-bench"
docs="${DOCS:-100000}"
partitions="${PARTITIONS:-128}"
concurrency="${CONCURRENCY:-16}"
duration="${DURATION:-10}"
ru_throughput="${RU_THROUGHPUT:-2000}"
ru_clients="${RU_CLIENTS:-16}"
log="${LOG:-/tmp/shardgate-request-units-$(date +%Y%m%d-%H%M%S).log}"

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
    echo "== building (release)"
    if [[ -z "${SHARDGATE_BIN:-}" ]]; then
        (cd "$repo" && cargo build --release --bin shardgate)
    fi
    (cd "$repo" && cargo build --release --bin shardgate-bench)
fi

# shellcheck source=bench/servers.sh
source "$repo/bench/servers.sh"

data_dir="$(mktemp -d /tmp/sgru-data.XXXXXX)"
trap stop_servers EXIT

# Starts shardgate on a free port with its own data directory and extra
# flags; sets `port` and `pid`.
start_shardgate() {
    local name="$1"
    shift
    port="$(free_port)"
    require_free "$port"
    mkdir -p "$data_dir/$name"
    "$shardgate_bin" --bind "127.0.0.1:$port" --data-dir "$data_dir/$name" \
        --log-level warn "$@" >"$data_dir/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_for_port "$port" "shardgate ($name)" "$pid"
}

uri() {
    echo "mongodb://127.0.0.1:$1/?directConnection=true"
}

: >"$log"
start_shardgate provisioned --default-throughput 1000000
provisioned_port="$port"
start_shardgate unprovisioned
unprovisioned_port="$port"
echo "== accounting cost: partitioned-read, provisioned vs unprovisioned (output also in $log)"
"$bench_bin" --workloads partitioned-read --partitions "$partitions" \
    --docs "$docs" --concurrency "$concurrency" --duration "$duration" \
    --uri "$(uri "$provisioned_port")" --label provisioned \
    --compare-uri "$(uri "$unprovisioned_port")" --compare-label unprovisioned \
    "$@" 2>&1 | tee -a "$log"

start_shardgate enforced --default-throughput "$ru_throughput"
echo
echo "== enforcement accuracy at $ru_throughput RU/s (output also in $log)"
"$bench_bin" --workloads ru-enforcement --ru-throughput "$ru_throughput" \
    --concurrency "$ru_clients" --duration "$duration" --warmup 2 \
    --uri "$(uri "$port")" "$@" 2>&1 | tee -a "$log"

echo
echo "== report"
grep -E '^(RATIO|RESULT workload=(partitioned-read|ru-enforcement)) ' "$log" || true
