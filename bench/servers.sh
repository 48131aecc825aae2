# shellcheck shell=bash
# Shared by the bench/run-*.sh scripts (sourced, not run): finding ports,
# waiting for a server to listen, and stopping every server started.
#
# A script appends each server's pid to `pids` and sets `data_dir`;
# `stop_servers` (installed as the EXIT trap) kills them and removes it.

pids=()

listening() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A port nothing listens on, from a random start so that concurrent runs
# rarely pick the same one.
free_port() {
    local port
    for _ in $(seq 1 200); do
        port=$((20000 + RANDOM % 20000))
        if ! listening "$port"; then
            echo "$port"
            return 0
        fi
    done
    echo "no free port found on 127.0.0.1" >&2
    return 1
}

# Fails when `port` is in use: the servers must be the ones started here.
require_free() {
    local port
    for port in "$@"; do
        if listening "$port"; then
            echo "something already listens on 127.0.0.1:$port; stop it or set CEILING_PORT/SHARDGATE_PORT" >&2
            exit 1
        fi
    done
}

# Waits until `name` (process `pid`) listens on `port`.
wait_for_port() {
    local port=$1 name=$2 pid=$3
    for _ in $(seq 1 150); do
        if listening "$port"; then
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$name exited before listening on 127.0.0.1:$port" >&2
            return 1
        fi
        sleep 0.2
    done
    echo "$name did not start listening on 127.0.0.1:$port" >&2
    return 1
}

stop_servers() {
    local pid
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if [[ -n "${data_dir:-}" ]]; then
        rm -rf "$data_dir"
    fi
}

# Takes `--workloads LIST` (or `--workloads=LIST`) out of the arguments.
# Usage: pick_workloads "<known workloads, in run order>" "<default list>" "$@"
# Sets `run` (the chosen workloads, in the known order) and `rest` (the
# other arguments); exits 2 on an unknown or empty choice.
pick_workloads() {
    local known="$1" chosen="$2" want w found
    shift 2
    rest=()
    while [[ $# -gt 0 ]]; do
        case "$1" in
        --workloads)
            [[ $# -ge 2 ]] || { echo "--workloads needs a list" >&2; exit 2; }
            chosen="$2"
            shift 2
            ;;
        --workloads=*)
            chosen="${1#--workloads=}"
            shift
            ;;
        *)
            rest+=("$1")
            shift
            ;;
        esac
    done
    local wanted=()
    IFS=, read -r -a wanted <<<"$chosen"
    for want in ${wanted[@]+"${wanted[@]}"}; do
        found=0
        for w in $known; do
            [[ "$want" == "$w" ]] && found=1
        done
        if [[ $found == 0 ]]; then
            echo "unknown workload '$want': pick from ${known// /, }" >&2
            exit 2
        fi
    done
    run=()
    for w in $known; do
        for want in ${wanted[@]+"${wanted[@]}"}; do
            if [[ "$want" == "$w" ]]; then
                run+=("$w")
                break
            fi
        done
    done
    if [[ ${#run[@]} == 0 ]]; then
        echo "--workloads names no workload" >&2
        exit 2
    fi
}
