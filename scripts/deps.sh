#!/usr/bin/env bash
# Installs the Debian packages mpiddp needs to build, test and demo (idempotent; root or sudo).
# Only packages that are missing are installed, so a second run is a no-op and needs no network.
set -euo pipefail
PKGS=(build-essential cmake pkg-config
      libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools libpmix-dev
      libopenblas-dev libdnnl-dev libcmocka-dev libinih-dev libcjson-dev zlib1g-dev
      python3-numpy python3-h5py python3-torch gnuplot-nox
      clang clang-format libclang-rt-14-dev valgrind strace slurm-wlm munge)
[ "${MPIDDP_DEPS_EXTRA:-}" ] && PKGS+=(${MPIDDP_DEPS_EXTRA})
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "deps: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: done"
