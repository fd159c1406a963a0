#!/bin/sh
# The examples that take arguments refuse what they cannot use with a message and a non-zero exit
# status, never an abort or a silent run with the defaults: unknown options, values that are not
# numbers, a preset that does not exist, an output path that cannot be written.
# Usage: check_cli.sh EXAMPLES_DIR
dir=$1
bad=/nonexistent-npurt-dir/out
status=0
expect_error() {  # expect_error STATUS PATTERN PROGRAM ARGS...
  want=$1
  pattern=$2
  shift 2
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne "$want" ] || ! printf '%s\n' "$err" | grep -q "$pattern"; then
    echo "FAIL: $* exited with $rc (want $want), stderr: $err"
    status=1
  else
    echo "ok: $*"
  fi
}
expect_error 1 "unknown option '--bogus'" "$dir/resnet50_step" --bogus 3
expect_error 1 "needs a value" "$dir/resnet50_step" --batch
expect_error 1 "not 'abc'" "$dir/resnet50_step" --batch abc
expect_error 1 "not '8x'" "$dir/resnet50_step" --batch 8x
expect_error 1 "not '0'" "$dir/resnet50_step" --batch 0
expect_error 1 "not '-5'" "$dir/resnet50_step" --batch -5
expect_error 2 "unknown preset 'foo'" "$dir/resnet50_step" --preset foo
expect_error 2 "cannot open preset file $bad.ini: No such file or directory" "$dir/resnet50_step" --preset $bad.ini
expect_error 2 "more than 2^52 elements" "$dir/resnet50_step" --batch 99999999999
expect_error 1 "usage" "$dir/profile_timeline" a.json b.svg c
expect_error 1 "cannot write $bad.json" "$dir/profile_timeline" $bad.json
expect_error 2 "usage" "$dir/data_parallel_sgd" --bogus 1
expect_error 2 "usage" "$dir/data_parallel_sgd" --steps 5x
expect_error 2 "usage" "$dir/data_parallel_sgd" --steps 1
expect_error 1 "not yet learned" "$dir/data_parallel_sgd" --steps 2
exit $status
