#!/usr/bin/env bash
# Builds the release server and installs its binary in DIR: the image's
# build stage runs this (docker/Dockerfile), and so does scripts/test, so
# every test runs the binary the image would hold.
#
#   docker/build.sh DIR [CARGO_ARGS...]    build, then install DIR/shardgate
#
# --locked: the image holds exactly the dependencies in Cargo.lock. Extra
# arguments go to `cargo build` (scripts/test passes --quiet). The build
# lands in $CARGO_TARGET_DIR (default target/ in the repository), so a
# second run rebuilds only what changed.
#
# The installed binary has no debug information (the release profile's
# line tables are four fifths of its size); its symbol table stays, so a
# backtrace still names functions.
set -euo pipefail

if [ $# -lt 1 ] || [ -z "$1" ]; then
    echo "usage: docker/build.sh DIR [CARGO_ARGS...]" >&2
    exit 2
fi
dest="$1"
shift
# DIR is taken from where the script was called, before moving to the root.
case "$dest" in /*) ;; *) dest="$PWD/$dest" ;; esac

cd "$(dirname "$0")/.."
cargo build --release --locked -p shardgate "$@"
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
install -D -m 0755 "$target/release/shardgate" "$dest/shardgate"
strip --strip-debug "$dest/shardgate"
