#!/usr/bin/env bash
# Installs what is missing, builds npurt (release, every target) and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
dir=${NPURT_BUILD_DIR:-build}
[ -f "$dir/build.ninja" ] || meson setup "$dir" -Dbuildtype=${NPURT_BUILDTYPE:-release} ${NPURT_MESON_ARGS:-}
ninja -C "$dir"
meson test -C "$dir" --print-errorlogs --num-processes 2 ${NPURT_TEST_ARGS:-}
