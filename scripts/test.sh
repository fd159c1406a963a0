#!/usr/bin/env bash
# Installs what is missing, builds npurt (release, every target) and runs every test.
# Environment (used by .ci/run): NPURT_BUILD_DIR (default build), NPURT_BUILDTYPE (release; empty:
# none, when NPURT_MESON_ARGS sets -Doptimization and -Ddebug), NPURT_MESON_ARGS (more meson setup
# options), NPURT_JOBS (compile jobs, default: ninja's), NPURT_TEST_ARGS (more meson test options).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
dir=${NPURT_BUILD_DIR:-build}
buildtype=${NPURT_BUILDTYPE-release}
[ -f "$dir/build.ninja" ] || meson setup "$dir" ${buildtype:+-Dbuildtype=$buildtype} ${NPURT_MESON_ARGS:-}
ninja -C "$dir" ${NPURT_JOBS:+-j "$NPURT_JOBS"}
meson test -C "$dir" --print-errorlogs --num-processes "${NPURT_TEST_PROCESSES:-2}" ${NPURT_TEST_ARGS:-}
