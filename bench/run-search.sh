#!/usr/bin/env bash
# Builds Shardgate, the benchmark and the ceiling server; starts the
# ceiling and Shardgate (on a fresh data directory), both on free loopback
# ports; runs the search workloads, each in its own shardgate-bench run,
# first on unsharded collections and then on collections sharded on
# {_id: "hashed"} over PARTITIONS (8) partitions, each query timed on
# Shardgate and then, unchecked, on the ceiling (RESULT
# workload=<name>-ceiling-ratio); stops the servers; prints the report:
#
#   1. geo-near: GEO_DOCS (1,000,000) GeoJSON points with {loc: "2dsphere"};
#      $near limit 10 around random points;
#   2. text-search: TEXT_DOCS (100,000) documents of 33 words with
#      {title: "text", body: "text"}; a two-word $text sorted by
#      {$meta: "textScore"}, limit 10;
#   3. collated-eq: COLLATION_DOCS (200,000) mixed-case user names with a
#      {name: 1} index (unique when unsharded) under {locale: "en",
#      strength: 2}; find by the name in another case with that collation.
#
# Each prints an EXAMINED line (keys and documents an explained query
# examined against what it returned) and its runs at concurrency 1 and 16
# with the server's CPU per query. Every answer is checked (see
# bench/src/search.rs). About 10 minutes with the defaults on two cores
# (plus the build).
#
#   bench/run-search.sh                                  # defaults
#   GEO_DOCS=100000 bench/run-search.sh --duration 3     # a quick look
#   bench/run-search.sh --workloads text-search          # only that one
#
# --workloads LIST (any of geo-near, text-search, collated-eq) picks the
# workloads; the script takes it out of the arguments. The other extra
# arguments go to every shardgate-bench run and win over the script's
# defaults. Environment: GEO_DOCS, TEXT_DOCS, COLLATION_DOCS, PARTITIONS
# (0 skips the sharded runs), CONCURRENCY (1,16), DURATION (seconds per
# timed run after 1 s of warm-up, 10), SHARDGATE_PORT, SHARDGATE_BIN,
# SERVER_ARGS, LOG, SKIP_BUILD=1, CEILING_DIR (the ceiling's sources,
# default ../shared/tools/ceiling beside the repository), CEILING_TARGET_DIR.
# CARGO_TARGET_DIR is honoured.
#
# Exits non-zero when any workload failed (after running the rest).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
ceiling_dir="${CEILING_DIR:-$repo/../shared/tools/ceiling}"
ceiling_target="${CEILING_TARGET_DIR:-/tmp/ceiling-target}"
shardgate_bin="${SHARDGATE_BIN:-$target_dir/release/shardgate}"
bench_bin="$target_dir/release/shardgate-bench"
partitions="${PARTITIONS:-8}"
concurrency="${CONCURRENCY:-1,16}"
duration="${DURATION:-10}"
log="${LOG:-/tmp/shardgate-search-$(date +%Y%m%d-%H%M%S).log}"
read -r -a server_args <<<"${SERVER_ARGS:-}"

# shellcheck source=bench/servers.sh
source "$repo/bench/servers.sh"
pick_workloads "geo-near text-search collated-eq" "geo-near,text-search,collated-eq" "$@"
set -- ${rest[@]+"${rest[@]}"}

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
    echo "== building (release)"
    cargo build --release --manifest-path "$ceiling_dir/Cargo.toml" --target-dir "$ceiling_target"
    (cd "$repo" && cargo build --release -p shardgate --bin shardgate -p shardgate-bench --bin shardgate-bench)
fi

ceiling_port="$(free_port)"
shardgate_port="${SHARDGATE_PORT:-$(free_port)}"
require_free "$ceiling_port" "$shardgate_port"

data_dir="$(mktemp -d /tmp/sgsearch-data.XXXXXX)"
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
        --geo-docs "${GEO_DOCS:-1000000}" \
        --text-docs "${TEXT_DOCS:-100000}" \
        --collation-docs "${COLLATION_DOCS:-200000}" \
        --concurrency "$concurrency" \
        --duration "$duration" \
        "$@"
}

layouts=(0)
[[ "$partitions" != 0 ]] && layouts+=("$partitions")
: >"$log"
failed=()
for w in "${run[@]}"; do
    for p in "${layouts[@]}"; do
        echo "== $w, partitions $p (output also in $log)"
        # The script's arguments come last, so they win.
        if ! bench --workloads "$w" --search-partitions "$p" "$@" 2>&1 | tee -a "$log"; then
            failed+=("$w/$p")
            echo "== $w, partitions $p failed" | tee -a "$log"
        fi
        echo
    done
done

echo "== report"
grep -E '^(RESULT .*workload=(geo-near|text-search|collated-eq|search-build)|SETUP |EXAMINED |RSS pid=[0-9]+ after=end |  (warning|first error))' "$log" || true
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "failed: ${failed[*]} (see $log and $server_log)" >&2
    exit 1
fi
