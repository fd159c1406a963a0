#!/usr/bin/env bash
# Compiles the C++ examples of a Markdown file as a user would, so documentation cannot drift from
# the headers. A fenced ```cpp block is checked when the line before it (blank lines aside) is
#   <!-- compile -->   compiled to an object file against include/ and sim/include/
#   <!-- run -->       also linked against a build's libraries (the graph and model libraries too,
#                      when the build has them) and run, in an empty folder; it must exit with 0
# Other blocks (fragments, pseudo-code) are left alone. Blocks are compiled with -Wall -Wextra
# -Werror: a reader who copies one with warnings on must not get any.
# Usage: scripts/check-readme.sh [FILE.md] [BUILD_DIR]   (defaults: README.md, build)
# CXX overrides the compiler (default g++-12, else c++).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
md=${1:-$root/README.md}
build=${2:-$root/build}
cxx=${CXX:-$(command -v g++-12 || command -v c++)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Splits the marked blocks into $tmp/block_<line>.<mode>.cpp (line = where the block starts).
python3 - "$md" "$tmp" <<'PY'
import pathlib, re, sys
md, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
lines = md.read_text().splitlines()
mode, i = None, 0
while i < len(lines):
    s = lines[i].strip()
    m = re.fullmatch(r'<!--\s*(compile|run)\s*-->', s)
    if m:
        mode = m.group(1)
    elif s.startswith('```'):
        lang = s[3:].strip().lower()
        start = i + 1
        j = start
        while j < len(lines) and not lines[j].strip().startswith('```'):
            j += 1
        if mode and lang in ('cpp', 'c++'):
            # #line: the compiler's messages point into the Markdown file.
            body = f'#line {start + 1} "{md.name}"\n' + '\n'.join(lines[start:j]) + '\n'
            (out / f'block_{start:05d}.{mode}.cpp').write_text(body)
        elif mode:
            sys.exit(f'{md}:{i + 1}: <!-- {mode} --> must be followed by a ```cpp block')
        mode, i = None, j
    elif s:
        mode = None  # a marker applies only to the block right after it
    i += 1
PY
shopt -s nullglob
blocks=("$tmp"/block_*.cpp)
header_only() {  # the build's header_only option: True or False
  python3 -c 'import json, sys
print(next(o["value"] for o in json.load(open(sys.argv[1])) if o["name"] == "header_only"))' \
    "$1/meson-info/intro-buildoptions.json" 2>/dev/null || echo unknown
}
flags=(-std=c++20 -Wall -Wextra -Werror -I"$root/include" -I"$root/sim/include" -DBOOST_ASIO_NO_DEPRECATED)
check_block() {  # check_block FILE: compiles (and runs) one block; prints one line; fails if it does
  local b=$1 name line where libs mode
  name=$(basename "$b" .cpp)
  line=$((10#$(echo "$name" | sed -E 's/block_([0-9]+)\..*/\1/')))
  where="$(basename "$md"):$line"
  if [[ $name == *.run ]]; then
    # As a consumer of that build: with its runtime library and NPURT_SEPARATE_COMPILATION when
    # it compiled the runtime once (the default), header-only otherwise.
    libs=()
    for lib in lib/graph/libnpurt_graph.a lib/models/libnpurt_models.a; do  # in pkg-config's order
      if [ -f "$build/$lib" ]; then libs+=("$build/$lib"); fi
    done
    libs+=("$build/sim/libnpurt_sim.a")
    mode=()
    if [ "$build_header_only" = False ]; then
      libs+=("$build/lib/libnpurt.a")
      mode=(-DNPURT_SEPARATE_COMPILATION)
    fi
    if [ ! -f "$build/sim/libnpurt_sim.a" ] || [ ! -f "${libs[-1]}" ]; then echo "$where: no ${libs[*]} to link against (build first)"; return 1; fi
    if "$cxx" "${flags[@]}" "${mode[@]}" -o "$tmp/$name" "$b" "${libs[@]}" -lmimalloc -pthread && (mkdir "$tmp/$name.dir" && cd "$tmp/$name.dir" && "../$name" >/dev/null); then
      echo "$where: compiles and runs"
    else
      echo "$where: FAILED (the block from line $line, compiled and run)"; return 1
    fi
  elif "$cxx" "${flags[@]}" -c -o "$tmp/$name.o" "$b"; then
    echo "$where: compiles"
  else
    echo "$where: FAILED (the block from line $line)"; return 1
  fi
}
build_header_only=$(header_only "$build")
# The blocks are independent: as many at a time as there are cores (NPURT_JOBS), each one's
# messages kept apart and printed in the file's order.
parallel=${NPURT_JOBS:-$(nproc)}
pids=()
for b in "${blocks[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  check_block "$b" >"$b.log" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!blocks[@]}"; do
  wait "${pids[$i]}" || failed=$((failed + 1))
  cat "${blocks[$i]}.log"
done
echo "readme: ${#blocks[@]} blocks checked in $(basename "$md"), $failed failed"
[ "$failed" -eq 0 ]
