#!/usr/bin/env bash
# Builds Shardgate, the benchmark and the ceiling server; starts the
# ceiling and Shardgate (on a fresh data directory), both on loopback;
# runs, each in its own shardgate-bench run:
#
#   1. load and update of DOCS (20,000) documents of DOC_SIZE (1,000)
#      bytes at CONCURRENCY (16), DURATION (5) seconds each after 1 s of
#      warm-up, on Shardgate and then on the ceiling, without change
#      streams;
#   2. the same with WATCHERS (1) change streams held open on the
#      collection during each run (--watchers), each counting the events
#      it receives (WATCHERS lines); a server that refuses change streams
#      (the ceiling) runs without them;
#   3. change-latency on Shardgate only: one writer inserting CHANGE_RATE
#      (1,000) documents a second for DURATION seconds while a change
#      stream receives them; p50, p99 and max delivery latency from each
#      insert's acknowledgement to its event's receipt, with the writes
#      and events counted (a MISMATCH line when they differ);
#
# stops the servers; prints the report: each run's figures with its ratio
# to the ceiling measured in the same shardgate-bench run (RATIO lines),
# the CPU per operation of both servers (COST lines), and, per workload,
# Shardgate's throughput with the streams open as a fraction of without
# (CHANGES lines). About a minute with the defaults on two cores (plus
# the build).
#
#   bench/run-changes.sh                                     # defaults
#   WATCHERS=4 CHANGE_RATE=5000 bench/run-changes.sh
#   SHARDGATE_BIN=/path/to/other/shardgate bench/run-changes.sh   # another build
#
# Extra arguments go to every shardgate-bench run and win over the
# script's defaults. Environment: DOCS, DOC_SIZE, DURATION, CONCURRENCY,
# WATCHERS, CHANGE_RATE, CEILING_PORT, SHARDGATE_PORT (default: free
# ports), SHARDGATE_BIN (the server binary; when set, the server is not
# built), SHARDGATE_ARGS (extra server flags), LOG (where the output is
# also written), SKIP_BUILD=1 (build nothing), CEILING_DIR (the ceiling's
# sources, default ../shared/tools/ceiling beside the repository),
# CEILING_TARGET_DIR. CARGO_TARGET_DIR is honoured.
#
# Exits non-zero when any run failed (after running the rest).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
ceiling_dir="${CEILING_DIR:-$repo/../shared/tools/ceiling}"
ceiling_target="${CEILING_TARGET_DIR:-/tmp/ceiling-target}"
shardgate_bin="${SHARDGATE_BIN:-$target_dir/release/shardgate}"
bench_bin="$target_dir/release/shardgate-bench"
docs="${DOCS:-20000}"
doc_size="${DOC_SIZE:-1000}"
duration="${DURATION:-5}"
concurrency="${CONCURRENCY:-16}"
watchers="${WATCHERS:-1}"
change_rate="${CHANGE_RATE:-1000}"
log="${LOG:-/tmp/shardgate-changes-$(date +%Y%m%d-%H%M%S).log}"
read -r -a server_args <<<"${SHARDGATE_ARGS:-}"

# shellcheck source=bench/servers.sh
source "$repo/bench/servers.sh"

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

data_dir="$(mktemp -d /tmp/sgchanges-data.XXXXXX)"
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

shardgate_uri="mongodb://127.0.0.1:$shardgate_port/?directConnection=true"
ceiling_uri="mongodb://127.0.0.1:$ceiling_port/?directConnection=true"

# The YCSB workloads on Shardgate and the ceiling, alternating.
ycsb() {
    "$bench_bin" \
        --uri "$shardgate_uri" \
        --compare-uri "$ceiling_uri" \
        --rss-pid "$shardgate_pid" \
        --cost "shardgate=$shardgate_pid" --compare-cost "ceiling=$ceiling_pid" \
        --workloads load,update \
        --docs "$docs" --doc-size "$doc_size" \
        --concurrency "$concurrency" \
        --duration "$duration" \
        "$@"
}

# change-latency on Shardgate alone.
latency() {
    "$bench_bin" \
        --uri "$shardgate_uri" \
        --rss-pid "$shardgate_pid" \
        --workloads change-latency \
        --doc-size "$doc_size" \
        --duration "$duration" \
        --change-rate "$change_rate" \
        "$@"
}

# The passes, in order: a name (the report's sections use it) and a
# command. The script's arguments come last, so they win.
passes=(plain watched latency)
declare -A titles=(
    [plain]="load,update without change streams"
    [watched]="load,update with $watchers change stream(s) open on Shardgate"
    [latency]="change-latency on Shardgate, $change_rate writes/s"
)

: >"$log"
failed=()
for pass in "${passes[@]}"; do
    echo "== pass $pass: ${titles[$pass]} (output also in $log)" | tee -a "$log"
    case "$pass" in
    plain) run=(ycsb --watchers 0 "$@") ;;
    watched) run=(ycsb --watchers "$watchers" "$@") ;;
    latency) run=(latency "$@") ;;
    esac
    if ! "${run[@]}" 2>&1 | tee -a "$log"; then
        failed+=("$pass")
        echo "== pass $pass failed" | tee -a "$log"
    fi
    echo
done

echo "== report"
# Each pass's lines, under its title.
awk -v plain="${titles[plain]}" -v watched="${titles[watched]}" -v latency="${titles[latency]}" '
    /^== pass / {
        pass = $3
        sub(/:$/, "", pass)
        title = (pass == "plain") ? plain : (pass == "watched") ? watched : latency
        print "-- " title
        next
    }
    /^(RESULT |RATIO |COST |WATCHERS |MISMATCH |  (warning|first error|watcher error))/ || /^[^ ].*: (watchers )?unsupported/ {
        print
    }
' "$log"

# Shardgate with the streams open as a fraction of without, and both
# passes as a fraction of the ceiling measured beside them.
echo "-- change streams' cost to Shardgate's throughput"
awk '
    function field(name,    i, kv) {
        for (i = 1; i <= NF; i++) {
            split($i, kv, "=")
            if (kv[1] == name) return substr($i, length(name) + 2)
        }
        return ""
    }
    /^== pass / { pass = $3; sub(/:$/, "", pass); next }
    /^RESULT target=shardgate / && (pass == "plain" || pass == "watched") {
        key = field("workload") " conc=" field("conc")
        if (!(key in seen)) { seen[key] = 1; order[++n] = key }
        rate[pass, key] = field("ops_per_sec")
    }
    /^RATIO / && (pass == "plain" || pass == "watched") {
        ratio[pass, field("workload") " conc=" field("conc")] = field("fraction")
    }
    /^WATCHERS target=shardgate / && pass == "watched" {
        events[field("workload") " conc=" field("conc")] = field("events")
    }
    END {
        for (i = 1; i <= n; i++) {
            key = order[i]
            plain = rate["plain", key]
            watched = rate["watched", key]
            if (plain == "" || watched == "") continue
            line = sprintf("CHANGES workload=%s ops_per_sec=%s watched_ops_per_sec=%s", key, plain, watched)
            if (plain + 0 > 0) line = line sprintf(" watched_fraction=%.3f", watched / plain)
            line = line " events=" ((key in events) ? events[key] : "unsupported")
            if (("plain", key) in ratio) line = line " ceiling_fraction=" ratio["plain", key]
            if (("watched", key) in ratio) line = line " watched_ceiling_fraction=" ratio["watched", key]
            print line
        }
    }
' "$log"

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "failed: ${failed[*]} (see $log and $server_log)" >&2
    exit 1
fi
