#!/usr/bin/env bash
# The time to move a partition between two PostgreSQL servers, and the
# throughput dip of the operations running meanwhile (shardgate-bench's
# move-partition workload, see bench/src/partition_move.rs):
#
#   1. scripts/pg-fleet starts 2 fresh PostgreSQL servers (fsync and
#      synchronous commit on); one Shardgate gateway serves them with
#      `--balancer off`, so only the measured move moves anything;
#   2. `moving` is sharded on {_id: "hashed"} over 2 partitions and filled
#      with DOCS documents of about 1 KB (half in each partition: the
#      default 2,000,000 makes each partition about 1 GB of documents);
#   3. CONCURRENCY tasks run point reads and updates by _id (half each) for
#      BEFORE seconds, then the partition starting at MinKey moves to the
#      other server (moveChunk) while they go on, and for AFTER seconds more.
#
# Printed: a SECOND line per second (operations completed, errors, slowest
# operation), a MOVE line (the command's millis, documents and bytes moved,
# MB/s, ops/s per second before/during/after) and the cores Shardgate and
# the PostgreSQL servers used in each phase.
#
# About 15 minutes on two cores with the defaults (most of it the load).
#
#   bench/run-move.sh                         # defaults, see below
#   DOCS=20000 BEFORE=5 AFTER=5 bench/run-move.sh   # a quick look
#
# Extra arguments go to shardgate-bench. Environment: DOCS (2000000),
# CONCURRENCY (8), BEFORE (20), AFTER (75: the old copy is deleted a minute
# after the move, inside that window), SHARDGATE_BIN, LOG (where the output
# is also written), SKIP_BUILD=1 (use the binaries already built).
# CARGO_TARGET_DIR is honoured.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
shardgate_bin="${SHARDGATE_BIN:-$target_dir/release/shardgate}"
bench_bin="$target_dir/release/shardgate-bench"
docs="${DOCS:-2000000}"
concurrency="${CONCURRENCY:-8}"
before="${BEFORE:-20}"
after="${AFTER:-75}"
log="${LOG:-/tmp/shardgate-move-$(date +%Y%m%d-%H%M%S).log}"

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
    echo "== building (release)"
    (cd "$repo" && cargo build --release -p shardgate -p shardgate-bench)
fi

# shellcheck source=bench/servers.sh
source "$repo/bench/servers.sh"

fleet_dir=""
cleanup() {
    stop_servers
    if [[ -n "$fleet_dir" ]]; then
        "$repo/scripts/pg-fleet" stop "$fleet_dir" >/dev/null 2>&1 || true
        rm -rf "$fleet_dir"
    fi
}
trap cleanup EXIT

fleet_dir="$(mktemp -d /tmp/sgmove-fleet.XXXXXX)"
echo "== starting 2 PostgreSQL servers in $fleet_dir"
"$repo/scripts/pg-fleet" start 2 "$fleet_dir" >/dev/null
backend=(--backend postgres)
while read -r url; do
    backend+=(--postgres "$url")
done <"$fleet_dir/urls"
postmasters=()
for k in 0 1; do
    postmasters+=("$(head -n 1 "$fleet_dir/pg$k/data/postmaster.pid")")
done

port="$(free_port)"
require_free "$port"
echo "== shardgate on 127.0.0.1:$port"
"$shardgate_bin" --bind "127.0.0.1:$port" "${backend[@]}" --balancer off --log-level warn \
    >/tmp/shardgate-move.log 2>&1 &
shardgate_pid=$!
pids+=("$shardgate_pid")
wait_for_port "$port" shardgate "$shardgate_pid"

: >"$log"
echo "== load: $(uptime)" | tee -a "$log"
"$bench_bin" \
    --uri "mongodb://127.0.0.1:$port/?directConnection=true" \
    --label postgres2 \
    --workloads move-partition \
    --move-docs "$docs" --concurrency "$concurrency" \
    --move-before-secs "$before" --move-after-secs "$after" --load-timeout 7200 \
    --cost "shardgate=$shardgate_pid" \
    --cost "postgres=$(IFS=,; echo "${postmasters[*]}")" \
    "$@" 2>&1 | tee -a "$log"
echo "== load: $(uptime)" | tee -a "$log"

# Operations per second in 5-second windows, with the phases they cover
# (edge: a second only partly inside the move).
echo
echo "== ops/s in 5-second windows (output also in $log)"
awk '
function field(name,   i) {
    for (i = 1; i <= NF; i++) if (index($i, name "=") == 1) return substr($i, length(name) + 2)
    return ""
}
/^SECOND / {
    w = int(field("t") / 5)
    ops[w] += field("ops"); errs[w] += field("errors"); secs[w]++
    p = field("phase")
    if (index(phases[w], p) == 0) phases[w] = phases[w] (phases[w] == "" ? "" : ",") p
    if (w > last) last = w
}
END {
    printf "%-9s %10s %7s  %s\n", "seconds", "ops/s", "errors", "phase"
    for (w = 0; w <= last; w++)
        if (secs[w] > 0)
            printf "%3d-%-5d %10.0f %7d  %s\n", w * 5, w * 5 + secs[w], ops[w] / secs[w], errs[w], phases[w]
}
' "$log" | tee -a "$log"
