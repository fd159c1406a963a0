#!/usr/bin/env bash
# Builds the libFuzzer targets of test/fuzz with clang-19 (instrumented with ASan + UBSan) and runs
# each for a bounded time, starting from its seeds in test/fuzz/corpus/<name>/ when there are any.
# A crash, leak, sanitizer report or timeout fails; the input that caused it is kept in the
# build directory (crash-*, leak-*, timeout-*) and printed.
# Environment: NPURT_FUZZ_SECONDS (per target, default 60), NPURT_BUILD_DIR (default build-fuzz),
#   NPURT_JOBS (compile jobs, default: ninja's), CXX (default clang++-19).
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${NPURT_BUILD_DIR:-build-fuzz}
secs=${NPURT_FUZZ_SECONDS:-60}
jobs=()
[ -n "${NPURT_JOBS:-}" ] && jobs=(-j "$NPURT_JOBS")
if [ ! -f "$dir/build.ninja" ]; then
  CXX=${CXX:-clang++-19} meson setup "$dir" -Dbuildtype=plain -Dfuzzing=true -Db_sanitize=address,undefined \
    -Db_lundef=false "-Dcpp_args=-O1 -g -fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" \
    -Dbenchmarks=false -Dexamples=false -Dtools=false -Dheader_tests=false || exit 1
fi
ninja -C "$dir" "${jobs[@]}" fuzz || exit 1
passed=0
failed=0
for exe in "$dir"/test/fuzz/fuzz_*; do
  [ -x "$exe" ] && [ -f "$exe" ] || continue
  name=$(basename "$exe")
  name=${name#fuzz_}
  corpus="$dir/corpus-$name"
  mkdir -p "$corpus"
  [ -d "test/fuzz/corpus/$name" ] && cp -n "test/fuzz/corpus/$name"/* "$corpus"/ 2>/dev/null
  echo "--- fuzz_$name: ${secs} s"
  if (cd "$dir" && "./test/fuzz/fuzz_$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "corpus-$name" >"fuzz-$name.log" 2>&1); then
    echo "fuzz_$name: ok ($(grep -E 'stat::number_of_executed_units' "$dir/fuzz-$name.log" | awk '{print $2}') runs)"
    passed=$((passed + 1))
  else
    echo "fuzz_$name: FAILED"
    grep -E -A30 'ERROR: (libFuzzer|AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer)|runtime error|SUMMARY' "$dir/fuzz-$name.log" | head -60
    ls "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* 2>/dev/null
    failed=$((failed + 1))
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
