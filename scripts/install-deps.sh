#!/usr/bin/env bash
# Installs what Tessera needs to build and test, from Debian 12's packages only.
# Idempotent and quick when everything is already there. Needs root (or sudo).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config clang-format
  libyaml-cpp-dev nlohmann-json3-dev libsqlite3-dev sqlite3 libcpp-httplib-dev libssl-dev
  libcli11-dev libspdlog-dev libfmt-dev libcurl4-openssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev libmimalloc-dev
  python3 curl procps
)
# Extra packages that some components' tests need live in scripts/deps.d/*.list (one per line).
shopt -s nullglob
for list in "$(dirname "$0")"/deps.d/*.list; do
  while read -r pkg; do
    [[ -z "$pkg" || "$pkg" == \#* ]] || PACKAGES+=("$pkg")
  done <"$list"
done

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
  --no-install-recommends "${missing[@]}"
