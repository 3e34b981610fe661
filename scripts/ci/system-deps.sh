#!/usr/bin/env bash
# Debian packages the build, the tests and the container pipeline use. Idempotent;
# needs root (CI and these dev machines run as root). Elsewhere, install them by hand.
set -euo pipefail
# docker.io and debootstrap: the container pipeline (kiln cibuildwheel installs them too when run alone).
packages=(ccache chromium chromium-driver diffoscope-minimal docker.io debootstrap)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "system-deps: missing Debian packages: ${missing[*]} (install them as root)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
