#!/usr/bin/env bash
# Checks that the C++ sources are formatted as .clang-format says; prints the first differences
# and exits non-zero otherwise. Usage: scripts/check-format.sh [--fix]
# CLANG_FORMAT overrides the binary (default clang-format-19: another version formats differently).
set -euo pipefail
cd "$(dirname "$0")/.."
cf=${CLANG_FORMAT:-clang-format-19}
dirs=(include sim lib test examples bench tools)
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- "${dirs[@]}" | grep -E '\.(hpp|ipp|cpp|h|cc)$')
else
  mapfile -t files < <(find "${dirs[@]}" -type f \( -name '*.hpp' -o -name '*.ipp' -o -name '*.cpp' -o -name '*.h' -o -name '*.cc' \) | sort)
fi
if [ "${1:-}" = "--fix" ]; then
  "$cf" -i "${files[@]}"
  exit 0
fi
if "$cf" --dry-run --Werror "${files[@]}" 2>/tmp/npurt-format.$$; then
  echo "format: ${#files[@]} files formatted"
  rm -f /tmp/npurt-format.$$
  exit 0
fi
n=$(grep -c 'error: code should be clang-formatted' /tmp/npurt-format.$$ || true)
head -40 /tmp/npurt-format.$$
echo "format: $n places in $(grep -o '^[^:]*' /tmp/npurt-format.$$ | grep -E '\.(hpp|ipp|cpp|h|cc)$' | sort -u | wc -l) files differ from .clang-format (fix: scripts/check-format.sh --fix)"
rm -f /tmp/npurt-format.$$
exit 1
