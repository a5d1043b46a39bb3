#!/usr/bin/env bash
# Installs the Debian packages estream needs to build and test (see README "Dependencies").
# Does nothing when they are all present. Needs root (or sudo) only when something is missing.
# Checks that need more install it themselves when missing (tools/cross-aarch64.sh its cross
# toolchain and qemu, tools/replicas-check.sh nginx): not here, because a newcomer's build
# should not get a web server (Debian's nginx package starts one on port 80).
set -euo pipefail
pkgs=(build-essential pkg-config liburing-dev libpcre2-dev libxxhash-dev libjansson-dev libcmocka-dev libsimde-dev clang python3 python3-venv)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
