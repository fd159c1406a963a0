#!/usr/bin/env bash
# Installs what is missing, builds npurt (release) and runs the main demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
[ -f build/build.ninja ] || meson setup build --buildtype=release
ninja -C build examples/hello_stream examples/multi_stream_events
./build/examples/hello_stream
./build/examples/multi_stream_events
