#!/usr/bin/env bash
# Builds Shardgate, the benchmark and the ceiling server; starts the
# ceiling and Shardgate (on a fresh data directory), both on free loopback
# ports; runs the transaction workloads, each in its own shardgate-bench
# run, on Shardgate and then on the ceiling at each CONCURRENCY level
# (1,16), DURATION (5) seconds each after 1 s of warm-up:
#
#   1. txn-single: transactions of two updates of one account
#      ($inc balance -1, then +1, both filtered by the shard key acct);
#   2. txn-cross: transactions moving 1 between two random accounts.
#
# Each first loads DOCS (1,000) accounts of DOC_SIZE (100) bytes into
# bench.txn_accounts, sharded on {acct: "hashed"}. Transactions go through
# the driver's convenient API, which retries write conflicts (TXN lines
# count the retries); after each run on Shardgate the balances are added
# up (BALANCE lines, MISMATCH when the sum moved; see
# bench/src/transactions.rs). Stops the servers; prints the report: the
# RESULT, RATIO (Shardgate's commits/s as a fraction of the ceiling's),
# TXN, BALANCE and COST lines. About a minute with the defaults on two
# cores (plus the build).
#
#   bench/run-transactions.sh                           # defaults
#   DOCS=100 CONCURRENCY=16 bench/run-transactions.sh   # more conflicts
#   bench/run-transactions.sh --workloads txn-cross     # only that one
#
# --workloads LIST (txn-single, txn-cross) picks the workloads; the script
# takes it out of the arguments. The other extra arguments go to every
# shardgate-bench run and win over the script's defaults. Environment:
# DOCS, DOC_SIZE, CONCURRENCY, DURATION, CEILING_PORT, SHARDGATE_PORT
# (default: free ports), SHARDGATE_BIN (the server binary; when set, the
# server is not built), SHARDGATE_ARGS (extra server flags), LOG (where the
# output is also written), SKIP_BUILD=1 (build nothing), CEILING_DIR (the
# ceiling's sources, default ../shared/tools/ceiling beside the
# repository), CEILING_TARGET_DIR. CARGO_TARGET_DIR is honoured.
#
# Exits non-zero when any run failed or any balance moved (after running
# the rest).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
ceiling_dir="${CEILING_DIR:-$repo/../shared/tools/ceiling}"
ceiling_target="${CEILING_TARGET_DIR:-/tmp/ceiling-target}"
shardgate_bin="${SHARDGATE_BIN:-$target_dir/release/shardgate}"
bench_bin="$target_dir/release/shardgate-bench"
docs="${DOCS:-1000}"
doc_size="${DOC_SIZE:-100}"
concurrency="${CONCURRENCY:-1,16}"
duration="${DURATION:-5}"
log="${LOG:-/tmp/shardgate-transactions-$(date +%Y%m%d-%H%M%S).log}"
read -r -a server_args <<<"${SHARDGATE_ARGS:-}"

# shellcheck source=bench/servers.sh
source "$repo/bench/servers.sh"

pick_workloads "txn-single txn-cross" "txn-single,txn-cross" "$@"
set -- ${rest[@]+"${rest[@]}"}

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
    echo "== building (release)"
    cargo build --release --manifest-path "$ceiling_dir/Cargo.toml" --target-dir "$ceiling_target"
    if [[ -n "${SHARDGATE_BIN:-}" ]]; then
        (cd "$repo" && cargo build --release -p shardgate-bench --bin shardgate-bench)
    else
        (cd "$repo" && cargo build --release -p shardgate --bin shardgate -p shardgate-bench --bin shardgate-bench)
    fi
fi

ceiling_port="${CEILING_PORT:-$(free_port)}"
shardgate_port="${SHARDGATE_PORT:-$(free_port)}"
require_free "$ceiling_port" "$shardgate_port"

data_dir="$(mktemp -d /tmp/sgtxn-data.XXXXXX)"
server_log="$data_dir.server.log"
trap stop_servers EXIT

echo "== starting the ceiling on 127.0.0.1:$ceiling_port"
"$ceiling_target/release/ceiling" --host 127.0.0.1 --port "$ceiling_port" >"$data_dir.ceiling.log" 2>&1 &
ceiling_pid=$!
pids+=("$ceiling_pid")
wait_for_port "$ceiling_port" ceiling "$ceiling_pid"
echo "== starting shardgate on 127.0.0.1:$shardgate_port, data in $data_dir, log in $server_log"
"$shardgate_bin" --bind "127.0.0.1:$shardgate_port" --data-dir "$data_dir" \
    --log-level warn ${server_args[@]+"${server_args[@]}"} >"$server_log" 2>&1 &
shardgate_pid=$!
pids+=("$shardgate_pid")
wait_for_port "$shardgate_port" shardgate "$shardgate_pid"

bench() {
    "$bench_bin" \
        --uri "mongodb://127.0.0.1:$shardgate_port/?directConnection=true" \
        --compare-uri "mongodb://127.0.0.1:$ceiling_port/?directConnection=true" \
        --rss-pid "$shardgate_pid" \
        --cost "shardgate=$shardgate_pid" --compare-cost "ceiling=$ceiling_pid" \
        --docs "$docs" --doc-size "$doc_size" \
        --concurrency "$concurrency" \
        --duration "$duration" \
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
grep -E '^(RESULT |RATIO |TXN |BALANCE |MISMATCH |COST |RSS pid=[0-9]+ after=end |  (warning|first error))|: unsupported' "$log" || true
if grep -q '^MISMATCH ' "$log"; then
    failed+=("balances")
fi
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "failed: ${failed[*]} (see $log and $server_log)" >&2
    exit 1
fi
