#!/usr/bin/env bash
# Builds Shardgate and the benchmark; starts Shardgate on a fresh data
# directory on a free loopback port; runs the resource workloads, each in
# its own shardgate-bench run; stops the server; prints the report:
#
#   1. unwind: $unwind of one document's array of 10,000, 40,000 and
#      100,000 elements, the median of 3 runs each (a run over 120 s is
#      abandoned and the larger sizes skipped);
#   2. cursor-memory: 200 finds sorted on an unindexed field with
#      batchSize 1, left open over a 100,000-document collection; the
#      server's RSS before, while and after opening them, then three read
#      to the end and all killed.
#
#   bench/run-robustness.sh                           # both
#   bench/run-robustness.sh --workloads unwind        # only that one
#   SHARDGATE_BIN=/path/to/other/shardgate bench/run-robustness.sh   # another build
#
# Extra arguments go to every shardgate-bench run (e.g. --cursors 50,
# --unwind-sizes 1000,10000). Environment: SHARDGATE_PORT (default: a free
# port), SHARDGATE_BIN (the server binary; when set, the server is not
# built), SERVER_ARGS (extra server flags), LOG (where the output is also
# written), SKIP_BUILD=1. CARGO_TARGET_DIR is honoured.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
shardgate_bin="${SHARDGATE_BIN:-$target_dir/release/shardgate}"
bench_bin="$target_dir/release/shardgate-bench"
log="${LOG:-/tmp/shardgate-robustness-$(date +%Y%m%d-%H%M%S).log}"
read -r -a server_args <<<"${SERVER_ARGS:-}"

# shellcheck source=bench/servers.sh
source "$repo/bench/servers.sh"
pick_workloads "unwind cursor-memory" "unwind,cursor-memory" "$@"
set -- ${rest[@]+"${rest[@]}"}

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
    echo "== building (release)"
    if [[ -n "${SHARDGATE_BIN:-}" ]]; then
        (cd "$repo" && cargo build --release -p shardgate-bench --bin shardgate-bench)
    else
        (cd "$repo" && cargo build --release -p shardgate --bin shardgate -p shardgate-bench --bin shardgate-bench)
    fi
fi

: >"$log"
failed=()
for w in "${run[@]}"; do
    # A fresh server per workload, so each RSS figure is its own.
    shardgate_port="${SHARDGATE_PORT:-$(free_port)}"
    require_free "$shardgate_port"
    data_dir="$(mktemp -d /tmp/sgrob-data.XXXXXX)"
    server_log="$data_dir.server.log"
    trap stop_servers EXIT
    echo "== $w: shardgate on 127.0.0.1:$shardgate_port, data in $data_dir, log in $server_log" | tee -a "$log"
    "$shardgate_bin" --bind "127.0.0.1:$shardgate_port" --data-dir "$data_dir" \
        --log-level warn ${server_args[@]+"${server_args[@]}"} >"$server_log" 2>&1 &
    shardgate_pid=$!
    pids=("$shardgate_pid")
    wait_for_port "$shardgate_port" shardgate "$shardgate_pid"
    if ! "$bench_bin" \
        --uri "mongodb://127.0.0.1:$shardgate_port/?directConnection=true" \
        --rss-pid "$shardgate_pid" \
        --workloads "$w" \
        "$@" 2>&1 | tee -a "$log"; then
        failed+=("$w")
        echo "== $w failed" | tee -a "$log"
    fi
    stop_servers
    echo
done

echo "== report"
grep -E '^RESULT workload=(unwind|cursor-memory)' "$log" | awk '!seen[$0]++' || true
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "failed: ${failed[*]} (see $log)" >&2
    exit 1
fi
