#!/usr/bin/env bash
# Installs what npurt and every leg of .ci/run need on Debian bookworm, and nothing when it is
# already there. Run as root (or with sudo available).
#   bookworm main:       g++, clang-19 (+ libclang-rt-19-dev for sanitizers and libFuzzer),
#                        clang-format-19, clang-tidy-19, range-v3, mimalloc, CLI11, ONNX (+ protobuf) and its test data
#   bookworm-backports:  Boost 1.83 (and Boost.JSON's library), Catch2 3, Meson >= 1.1
set -euo pipefail
main_pkgs=(g++ ninja-build pkg-config cmake git python3 librange-v3-dev libmimalloc-dev libcli11-dev
           clang-19 libclang-rt-19-dev clang-format-19 clang-tidy-19 libonnx-dev libprotobuf-dev libonnx-testdata)
bp_pkgs=(libboost1.83-dev libboost-json1.83-dev catch2 meson)
need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in "${main_pkgs[@]}"; do have "$p" || need+=("$p"); done
bp=()
for p in "${bp_pkgs[@]}"; do have "$p" || bp+=("$p"); done
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
