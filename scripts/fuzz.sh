#!/usr/bin/env bash
# Builds the libFuzzer targets of test/fuzz with clang-19 (instrumented with ASan + UBSan) and runs
# each for a bounded time, starting from its seeds in test/fuzz/corpus/<name>/ when there are any.
# A crash, leak, sanitizer report or timeout fails; the input that caused it is kept in the
# build directory (<target>-crash-*, -leak-*, -timeout-*) and printed.
# Environment: NPURT_FUZZ_SECONDS (per target, default 60), NPURT_FUZZ_PARALLEL (targets at a time,
#   default: the number of cores), NPURT_BUILD_DIR (default build-fuzz),
#   NPURT_JOBS (compile jobs, default: ninja's), CXX (default clang++-19), NPURT_FUZZ_OPT (the
#   optimisation and debug flags of a new build directory, default "-O1 -g").
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${NPURT_BUILD_DIR:-build-fuzz}
secs=${NPURT_FUZZ_SECONDS:-60}
jobs=()
[ -n "${NPURT_JOBS:-}" ] && jobs=(-j "$NPURT_JOBS")
if [ ! -f "$dir/build.ninja" ]; then
  # Separately compiled: the runtime's bodies are instrumented once, in lib/ (the global cpp_args
  # give it the same coverage instrumentation), not once per target.
  CXX=${CXX:-clang++-19} meson setup "$dir" -Dbuildtype=plain -Dfuzzing=true -Dheader_only=false -Db_sanitize=address,undefined \
    -Db_lundef=false "-Dcpp_args=${NPURT_FUZZ_OPT:--O1 -g} -fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" \
    -Dbenchmarks=false -Dexamples=false -Dtools=false -Dheader_tests=false || exit 1
fi
ninja -C "$dir" "${jobs[@]}" fuzz || exit 1
# The targets run side by side, as many at a time as there are cores (NPURT_FUZZ_PARALLEL):
# each is one single-threaded libFuzzer process, so the wall time is the per-target budget times
# the number of rounds, not times the number of targets.
parallel=${NPURT_FUZZ_PARALLEL:-$(nproc)}
names=()
for exe in "$dir"/test/fuzz/fuzz_*; do
  [ -x "$exe" ] && [ -f "$exe" ] || continue
  name=$(basename "$exe")
  names+=("${name#fuzz_}")
done
run_one() {  # run_one NAME: one bounded run; its exit status is the target's verdict
  local name=$1
  mkdir -p "$dir/corpus-$name"
  [ -d "test/fuzz/corpus/$name" ] && cp -n "test/fuzz/corpus/$name"/* "$dir/corpus-$name"/ 2>/dev/null
  (cd "$dir" && "./test/fuzz/fuzz_$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
     -print_final_stats=1 -artifact_prefix="./$name-" "corpus-$name" >"fuzz-$name.log" 2>&1)
}
declare -A pid_of
for name in "${names[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n; done
  echo "--- fuzz_$name: ${secs} s"
  run_one "$name" &
  pid_of[$name]=$!
done
passed=0
failed=0
for name in "${names[@]}"; do
  if wait "${pid_of[$name]}"; then
    echo "fuzz_$name: ok ($(grep -E 'stat::number_of_executed_units' "$dir/fuzz-$name.log" | awk '{print $2}') runs)"
    passed=$((passed + 1))
  else
    echo "fuzz_$name: FAILED"
    # Every line carries the target's name, so a log filtered on it (.ci/run's) keeps the report
    # and the input: a rare crash is then reproducible from the log alone, after the build
    # directory is gone (printf '%s' B64 | base64 -d > input; ./fuzz_NAME input).
    grep -E -A30 'ERROR: (libFuzzer|AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer)|runtime error|SUMMARY' \
      "$dir/fuzz-$name.log" | head -60 | sed "s/^/fuzz_$name| /"
    for f in "$dir/$name"-crash-* "$dir/$name"-leak-* "$dir/$name"-timeout-*; do
      [ -f "$f" ] || continue
      echo "fuzz_$name: input $(basename "$f"), $(stat -c %s "$f") bytes, base64: $(head -c 16384 "$f" | base64 -w0)"
    done
    failed=$((failed + 1))
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
