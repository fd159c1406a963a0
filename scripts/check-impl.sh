#!/usr/bin/env bash
# Checks that every impl/*.ipp is compiled by exactly one part of the separately compiled library
# (impl/src_core.hpp or impl/src_profiler.hpp): a body in neither is missing from lib/ and from
# impl/src.hpp (an undefined reference at link time), a body in both is defined twice.
set -euo pipefail
cd "$(dirname "$0")/.."
impl=include/npurt/impl
status=0
for f in "$impl"/*.ipp; do
  name=$(basename "$f")
  n=$(cat "$impl/src_core.hpp" "$impl/src_profiler.hpp" | grep -c "^#include <npurt/impl/$name>" || true)
  if [ "$n" != 1 ]; then
    echo "check-impl: $name is listed $n times in impl/src_core.hpp and impl/src_profiler.hpp (expected once)"
    status=1
  fi
done
for part in src_core src_profiler; do
  while read -r inc; do
    [ -f "$impl/$inc" ] || { echo "check-impl: impl/$part.hpp includes $inc, which does not exist"; status=1; }
  done < <(sed -n 's|^#include <npurt/impl/\(.*\.ipp\)>$|\1|p' "$impl/$part.hpp")
done
[ $status = 0 ] && echo "check-impl: $(ls "$impl"/*.ipp | wc -l) bodies, each in one part of the library"
exit $status
