#!/usr/bin/env bash
# Installs what npurt needs on Debian bookworm, and nothing when it is already there.
# Boost 1.83, Catch2 3 and Meson >= 1.1 come from bookworm-backports; range-v3 and mimalloc from main.
set -euo pipefail
need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in g++ ninja-build pkg-config cmake librange-v3-dev libmimalloc-dev; do have "$p" || need+=("$p"); done
bp=()
for p in libboost1.83-dev catch2 meson; do have "$p" || bp+=("$p"); done
# Catch2 2.x or an old Meson from main would not do: check versions, not just presence.
if have catch2 && ! dpkg --compare-versions "$(dpkg-query -W -f='${Version}' catch2)" ge 3; then bp+=(catch2); fi
if have meson && ! dpkg --compare-versions "$(dpkg-query -W -f='${Version}' meson)" ge 1.1; then bp+=(meson); fi
if [ ${#need[@]} -eq 0 ] && [ ${#bp[@]} -eq 0 ]; then exit 0; fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#bp[@]} -gt 0 ] && ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "deb http://deb.debian.org/debian bookworm-backports main" | $SUDO tee /etc/apt/sources.list.d/npurt-backports.list >/dev/null
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
[ ${#need[@]} -eq 0 ] || $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
[ ${#bp[@]} -eq 0 ] || $SUDO apt-get install -y -qq --no-install-recommends -t bookworm-backports "${bp[@]}"
