#!/bin/sh
# The benchmarks refuse what they cannot do with a message and a non-zero exit status, never a
# crash or a silent success: an output path that cannot be written (--json, --svg, --trace) and
# an --only that matches nothing are exit status 1; a negative seed is a usage error. Each case
# is the cheapest run that reaches the check.
# Usage: check_cli.sh BENCH_DIR
dir=$1
bad=/nonexistent-npurt-dir/out
status=0
# expect KIND OUT PATTERN PROGRAM ARGS...: runs PROGRAM with standard output to OUT and checks
# its status (KIND "one": exactly 1; "usage": CLI11's usage error, any status from 1 to 127, not a
# signal) and that its standard error matches PATTERN.
expect() {
  kind=$1
  out=$2
  pattern=$3
  shift 3
  err=$("$@" 2>&1 >"$out")
  rc=$?
  if [ "$kind" = one ]; then
    [ "$rc" -eq 1 ]
  else
    [ "$rc" -ge 1 ] && [ "$rc" -le 127 ]
  fi
  status_ok=$?
  if [ "$status_ok" -ne 0 ] || ! printf '%s\n' "$err" | grep -q "$pattern"; then
    echo "FAIL: $* > $out exited with $rc, stderr: $err"
    status=1
  else
    echo "ok: $* > $out"
  fi
}
expect_error() { expect one /dev/null "$@"; }     # expect_error PATTERN PROGRAM ARGS...
expect_refused() { expect usage /dev/null "$@"; } # expect_refused PATTERN PROGRAM ARGS...
# The table on a full disk: lost output is exit status 1 too.
for b in "fault_campaign --runs 1 --steps 1" "kernel_roofline --batch 1" "memplan --only paper_example --small-only"; do
  set -- $b
  prog=$1
  shift
  expect one /dev/full "$prog: cannot write to standard output" "$dir/$prog" "$@"
done
expect_refused "expected a whole number" "$dir/fault_campaign" --runs 1 --steps 1 --seed -1
expect_error "cannot write" "$dir/allocator" --cached-only --iters 1000 --json $bad.json
expect_error "no instance matches" "$dir/memplan" --only no-such-instance
empty=$(mktemp -d)
expect_error "no instance (\*.csv) in this folder" "$dir/memplan" --small-only --data "$empty"
rmdir "$empty"
expect_error "cannot write" "$dir/memplan" --only synthetic_30000 --small-only --json $bad.json
expect_error "cannot write" "$dir/priority_inversion" --quick --svg $bad
expect_error "cannot write" "$dir/stream_overhead" --case one_stream --rounds 1 --tasks 1000 --trace $bad.json
expect_error "collectives: cannot write $bad.json: No such file or directory" "$dir/collectives" --quick --json $bad.json
# A --json path that cannot be written is refused before the run: no table on standard output
# (this run would take tens of seconds).
table=$(mktemp)
expect one "$table" "graph_schedules: cannot write $bad.json: No such file or directory" "$dir/graph_schedules" --json $bad.json
if [ -s "$table" ]; then echo "FAIL: graph_schedules measured before refusing --json $bad.json"; status=1; fi
rm -f "$table"
expect_error "kernel_roofline: cannot write $bad.json: No such file or directory" "$dir/kernel_roofline" --batch 1 --json $bad.json
expect_error "sim_speed: cannot write $bad.json: No such file or directory" "$dir/sim_speed" --steps 1 --cluster-steps 1 --max-devices 1 --json $bad.json
expect_error "cannot write" "$dir/fault_campaign" --runs 1 --steps 1 --json $bad.json
expect_error "cannot write" "$dir/trace_summarize" --tasks 1000 --json $bad.json
exit $status
