#!/usr/bin/env bash
# device-kit.sh — everything a lent GPU machine lacks for mpiddp, carried as Debian packages, and one command
# that builds and checks mpiddp there (issue #22, part 1). See INSTALL, "On a lent GPU machine".
#
#   scripts/device-kit.sh fetch      here, with Debian's registry reachable: resolves the dependency closure of
#                                    Open MPI, parallel HDF5, OpenBLAS, PMIx, cmocka, inih, cJSON and pkgconf
#                                    against a bare Debian/Ubuntu-like CUDA image (its required packages plus
#                                    build-essential), minus what one node over shared memory never loads, and
#                                    downloads the .debs into .device-kit/debs (git-ignored; at most 56 MiB;
#                                    a second run downloads nothing). Nothing is built or installed here.
#   scripts/device-kit.sh run OUT    on the GPU machine: unpacks the .debs into a private prefix (no root, no
#                                    system change), builds mpiddp with the CUDA backend for the local GPU's
#                                    architecture, smoke-tests MPI + HDF5 on the CPU, then (exit 3 with "no
#                                    NVIDIA GPU" where there is none) runs scripts/gpu-check.sh and
#                                    benchmarks/run_gpu.sh, and writes OUT/report.md, OUT/steps.csv, OUT/log.txt
#                                    and the benchmarks' CSVs (8 files at most), within about 9 minutes.
#
# Environment: DEVICE_KIT_EXTRA="pkg ..." (fetch: more Debian packages, e.g. one a run named as missing);
# DEVICE_KIT_MIRROR (fetch: Debian mirror URL); DEVICE_KIT_APT (fetch: apt's private state directory);
# DEVICE_KIT_WORK (run: where the prefix and the build go; default /tmp/mpiddp-device-kit, outside the
# tree so that a later call does not carry them); DEVICE_KIT_BUDGET (run: seconds for the whole run, 530);
# DEVICE_KIT_GAPFILL=0 (run: keep every carried library even where the machine has the same soname);
# DEVICE_KIT_BENCH=0 (run: checks only, benchmarks/run_gpu.sh skipped: a rerun after a fix on a short lease;
# =kernels: checks, then run_gpu.sh's per-kernel table alone; =profile: no checks, benchmarks/profile_gpu.sh's
# Nsight Compute profile of the kernels alone, OUT/profile.md: the call after a first full run, on a warm machine).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
KIT=$REPO/.device-kit
DEBS=$KIT/debs
MANIFEST=$KIT/manifest.txt
LIMIT_BYTES=$((56 * 1024 * 1024))
SUITE=bookworm            # Debian 12: glibc 2.36, so its binaries also run on newer Ubuntu/Debian images
KIT_VERSION=2             # bump when the resolution rules below change

# What mpiddp needs that the GPU machine lacks (the brief's list; pkgconf because CMake finds most through it)
WANTED=(libopenmpi-dev openmpi-bin libhdf5-openmpi-dev libopenblas-dev libpmix-dev
        libcmocka-dev libinih-dev libcjson-dev zlib1g-dev pkgconf)
# What the closure of WANTED pulls in but one node never uses; treated as present, so neither they nor
# their own dependencies are downloaded. mpiddp is C; the .pc files and the headers mpiddp includes (mpi.h,
# hdf5.h, pmix.h, cblas.h, cJSON.h, ini.h, cmocka.h) need none of the -dev packages named here.
PRUNE=(
  gfortran gfortran-12 libgfortran-12-dev                                  # Open MPI's Fortran wrappers
  libhdf5-openmpi-fortran-102 libhdf5-openmpi-hl-fortran-100 libhdf5-openmpi-cpp-103-1 libhdf5-openmpi-hl-cpp-100
  libaec-dev libcurl4-openssl-dev libjpeg-dev libssl-dev                   # HDF5's static-link -dev extras
  libhwloc-dev libltdl-dev libevent-dev libnuma-dev                        # Open MPI/PMIx static-link extras
  libfabric1 libucx0 libpsm2-2 libpsm-infinipath1 libibverbs1 ibverbs-providers librdmacm1 libnuma1
  libibverbs-dev libnl-3-200 libnl-route-3-200 libnl-3-dev libnl-route-3-dev  # network transports (see MCA below)
  libhwloc-plugins                                                         # hwloc's XML/PCI/X11/OpenCL plugins
  libjs-jquery libjs-jquery-ui                                             # documentation
  openssh-client                                                           # mpirun starts local ranks itself
)
# Packages whose own libraries the build uses directly: always taken from the kit. The other carried
# libraries only fill gaps: where the machine already has the same soname, its own copy is used.
CORE_RE='^(libopenmpi3|openmpi-bin|openmpi-common|libopenmpi-dev|libhdf5-openmpi-.*|libopenblas.*|libpmix.*|libcmocka.*|libinih.*|libinireader.*|libcjson.*|pkgconf.*|libpkgconf.*|libhwloc15|libevent-.*)$'

die() { echo "device-kit: error: $*" >&2; exit 1; }
inputs_hash() {
  printf '%s\n' "$KIT_VERSION" "$SUITE" "${WANTED[*]}" "${PRUNE[*]}" "${DEVICE_KIT_EXTRA:-}" | sha256sum | cut -c1-16
}
manifest_ok() { # manifest for these inputs, and every .deb present with its recorded size and sha256
  [ -f "$MANIFEST" ] && [ "$(sed -n 's/^# inputs //p' "$MANIFEST")" = "$(inputs_hash)" ] || return 1
  local f size sha
  while read -r f size sha; do
    [ -f "$DEBS/$f" ] && [ "$(stat -c %s "$DEBS/$f")" = "$size" ] || return 1
  done < <(grep -v '^#' "$MANIFEST")
  (cd "$DEBS" && grep -v '^#' "$MANIFEST" | awk '{print $3"  "$1}' | sha256sum --quiet -c -) >/dev/null 2>&1
}
print_total() {
  local total n
  total=$(grep -v '^#' "$MANIFEST" | awk '{s += $2} END {print s + 0}')
  n=$(grep -vc '^#' "$MANIFEST")
  awk -v n="$n" -v t="$total" 'BEGIN { printf "device-kit: %d packages, %d bytes (%.1f MiB) in .device-kit/debs; limit 56 MiB\n", n, t, t / 1048576 }'
  [ "$total" -le "$LIMIT_BYTES" ] || die "the kit is over 56 MiB: prune more (PRUNE in $0)"
}

# ---------------------------------------------------------------------------------------------- fetch
fetch() {
  command -v apt-get >/dev/null || die "fetch needs apt-get (run it on a Debian/Ubuntu machine with network)"
  mkdir -p "$DEBS"
  if manifest_ok; then
    echo "device-kit: up to date (nothing downloaded)"
    print_total
    return 0
  fi
  local apt=${DEVICE_KIT_APT:-${XDG_CACHE_HOME:-$HOME/.cache}/mpiddp-device-kit-apt}
  local mirror=${DEVICE_KIT_MIRROR:-http://deb.debian.org/debian}
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -f "$keyring" ] || die "$keyring is missing (Debian's package debian-archive-keyring)"
  mkdir -p "$apt"/{lists/partial,cache/archives/partial,state,none}
  cat > "$apt/sources.list" <<EOF
deb [signed-by=$keyring] $mirror $SUITE main
deb [signed-by=$keyring] $mirror $SUITE-updates main
deb [signed-by=$keyring] ${DEVICE_KIT_SECURITY_MIRROR:-http://deb.debian.org/debian-security} $SUITE-security main
EOF
  : > "$apt/status-empty"
  local A=(-o Dir::Etc::SourceList="$apt/sources.list" -o Dir::Etc::SourceParts="$apt/none"
           -o Dir::Etc::Preferences="$apt/none/p" -o Dir::Etc::PreferencesParts="$apt/none"
           -o Dir::State="$apt/state" -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache"
           -o Debug::NoLocking=1 -o APT::Architecture=amd64 -o APT::Architectures::=amd64
           -o Acquire::Languages=none -o APT::Sandbox::User="$(id -un)" -q)
  echo "device-kit: updating the package lists of Debian $SUITE (private apt state in $apt)"
  apt-get "${A[@]}" -o Dir::State::status="$apt/status-empty" update >"$apt/update.log" 2>&1 ||
    { cat "$apt/update.log" >&2; die "apt-get update failed (network?)"; }

  # 1. What the GPU machine has: Debian's required packages and build-essential (nvcc needs gcc/g++), with
  #    their dependencies, resolved from nothing.
  local seeds
  seeds=$(apt-cache "${A[@]}" -o Dir::State::status="$apt/status-empty" dumpavail |
          awk 'BEGIN { RS = ""; FS = "\n" }
               /\nPriority: required(\n|$)/ || /\nEssential: yes(\n|$)/ { sub(/^Package: /, "", $1); print $1 }' | sort -u)
  [ -n "$seeds" ] || die "no required packages found in the lists"
  apt-get "${A[@]}" -o Dir::State::status="$apt/status-empty" install -s --no-install-recommends \
      $seeds build-essential 2>"$apt/base.err" | awk '/^Inst /{print $2 "=" substr($3, 2)}' > "$apt/base.txt"
  [ -s "$apt/base.txt" ] || { cat "$apt/base.err" >&2; die "could not resolve the base system"; }
  # 2. ... as installed packages in a private dpkg status file
  apt-cache "${A[@]}" -o Dir::State::status="$apt/status-empty" show --no-all-versions $(cat "$apt/base.txt") 2>/dev/null |
    awk 'BEGIN { RS = ""; ORS = "\n\n" } { print "Status: install ok installed\n" $0 }' > "$apt/status-base"
  # 3. The closure of WANTED against it: what the machine lacks ...
  local extra=()
  read -r -a extra <<< "${DEVICE_KIT_EXTRA:-}"
  apt-get "${A[@]}" -o Dir::State::status="$apt/status-base" install -s --no-install-recommends \
      "${WANTED[@]}" "${extra[@]}" 2>"$apt/closure.err" | awk '/^Inst /{print $2 "=" substr($3, 2)}' > "$apt/closure.txt"
  [ -s "$apt/closure.txt" ] || { cat "$apt/closure.err" >&2; die "could not resolve the kit"; }
  # ... less PRUNE and whatever only PRUNE needs: the packages reachable from WANTED through the
  # dependency graph inside the closure without passing a pruned package
  apt-cache "${A[@]}" -o Dir::State::status="$apt/status-base" depends --no-recommends --no-suggests --no-conflicts \
      --no-breaks --no-replaces --no-enhances $(sed 's/=.*//' "$apt/closure.txt") > "$apt/graph.txt" 2>/dev/null
  awk -v roots="${WANTED[*]} ${extra[*]}" -v prune="${PRUNE[*]}" '
    FNR == NR { split($0, nv, "="); inK[nv[1]] = $0; next }
    /^[^ ]/ { from = $1; next }
    /^ [ |](Pre)?Depends: / { virt = ($2 ~ /^</); t = $2; if (t in inK) edge[from] = edge[from] " " t; next }
    /^    [^ ]/ { if (virt && ($1 in inK)) edge[from] = edge[from] " " $1 }   # a virtual dependency'"'"'s providers
    END {
      n = split(prune, p, " "); for (i = 1; i <= n; i++) pruned[p[i]] = 1
      n = split(roots, r, " "); for (i = 1; i <= n; i++) if ((r[i] in inK) && !(r[i] in pruned)) { seen[r[i]] = 1; q[++qn] = r[i] }
      for (h = 1; h <= qn; h++) {
        m = split(edge[q[h]], e, " ")
        for (j = 1; j <= m; j++) if (!(e[j] in seen) && !(e[j] in pruned)) { seen[e[j]] = 1; q[++qn] = e[j] }
      }
      for (k in seen) print inK[k]
    }' "$apt/closure.txt" "$apt/graph.txt" | sort > "$apt/kit.txt"
  [ -s "$apt/kit.txt" ] || die "nothing left after pruning"
  echo "device-kit: assumed on the GPU machine: $(wc -l < "$apt/base.txt") packages; closure $(wc -l < "$apt/closure.txt"), pruned to $(wc -l < "$apt/kit.txt")"

  # 4. Download what is not there yet (checked by sha256), drop what is no longer wanted
  local new=0 tmp="$KIT/manifest.tmp" pv fn size sha
  printf '# inputs %s\n# device-kit %s, Debian %s, %s\n' "$(inputs_hash)" "$KIT_VERSION" "$SUITE" "$(date -u +%FT%TZ)" > "$tmp"
  while read -r pv; do
    read -r fn size sha < <(apt-cache "${A[@]}" -o Dir::State::status="$apt/status-base" show "$pv" 2>/dev/null |
      awk '/^Filename:/{n = split($2, a, "/"); f = a[n]} /^Size:/{s = $2} /^SHA256:/{h = $2} /^$/{exit} END{print f, s, h}')
    [ -n "$fn" ] && [ -n "$sha" ] || die "no archive record for $pv"
    if ! { [ -f "$DEBS/$fn" ] && echo "$sha  $DEBS/$fn" | sha256sum --quiet -c - >/dev/null 2>&1; }; then
      (cd "$DEBS" && apt-get "${A[@]}" -o Dir::State::status="$apt/status-base" download "$pv" >/dev/null 2>"$apt/download.err") ||
        { cat "$apt/download.err" >&2; die "apt-get download $pv failed"; }
      local got="$DEBS/${pv%%=*}_$(sed 's/:/%3a/' <<< "${pv#*=}")_"   # apt names an epoch "1%3a"; keep the archive's name
      [ -f "$DEBS/$fn" ] || mv "$got"*.deb "$DEBS/$fn"
      echo "$sha  $DEBS/$fn" | sha256sum --quiet -c - >/dev/null || die "$fn: sha256 mismatch"
      new=$((new + 1))
    fi
    echo "$fn $size $sha" >> "$tmp"
  done < "$apt/kit.txt"
  local f
  for f in "$DEBS"/*.deb; do
    [ -e "$f" ] || continue
    grep -q "^$(basename "$f") " "$tmp" || { rm -f "$f"; echo "device-kit: removed stale $(basename "$f")"; }
  done
  mv "$tmp" "$MANIFEST"
  sed 's/=.*//' "$apt/base.txt" > "$KIT/base.txt"   # what the kit assumes the machine has (tests/sh/device_kit.sh)
  echo "device-kit: downloaded $new new package(s)"
  print_total
}

# ------------------------------------------------------------------------------------------------ run
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
LOG=/dev/null
say() { echo "$*"; echo "$*" >> "$LOG"; }
STEP_NAME="" STEP_T=0
STEPS_CSV=/dev/null
step() { # step NAME: closes the previous step in steps.csv (status from $1 of step_end) and opens NAME
  STEP_NAME=$1 STEP_T=$(date +%s)
  say "== step $1 ($(el) s elapsed)"
}
step_end() { # step_end ok|FAILED|skipped|'cut short' [note]
  local s=$1; shift
  printf '%s,%s,%d,%s\n' "$STEP_NAME" "$s" $(( $(date +%s) - STEP_T )) "$*" >> "$STEPS_CSV"
  say "   $STEP_NAME: $s ($(( $(date +%s) - STEP_T )) s)${*:+ — $*}"
}
logrun() { "$@" >> "$LOG" 2>&1; } # full output to the log only

extract_deb() { # extract_deb FILE DIR: dpkg -x, or ar + tar where the machine has no dpkg
  if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$1" "$2"; return; fi
  python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", "not a .deb"
pos = 8
while pos < len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58])
    body = data[pos + 60:pos + 60 + size]
    pos += 60 + size + (size & 1)
    if name.startswith("data.tar"):
        if name.endswith(".zst"):
            import zstandard  # Debian 12 packages use xz; zstd only if a newer suite is ever chosen
            body = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read()
            name = "data.tar"
        with tarfile.open(fileobj=io.BytesIO(body)) as t:
            t.extractall(sys.argv[2], filter="tar") if hasattr(tarfile, "data_filter") else t.extractall(sys.argv[2])
PY
}
deb_files() { # deb_files FILE: the paths a .deb holds (./usr/...)
  if command -v dpkg-deb >/dev/null; then dpkg-deb --fsys-tarfile "$1" | tar -t; else
    python3 -c 'import sys,io,tarfile
d=open(sys.argv[1],"rb").read();p=8
while p<len(d):
  n=d[p:p+16].decode().strip().rstrip("/");s=int(d[p+48:p+58]);b=d[p+60:p+60+s];p+=60+s+(s&1)
  if n.startswith("data.tar"): print("\n".join(tarfile.open(fileobj=io.BytesIO(b)).getnames()))' "$1"; fi
}

unpack() { # into $R, once per manifest; relocated (absolute symlinks, .pc files, the alternatives' links)
  local stamp="$R/.kit-stamp" want
  want=$(sha256sum "$MANIFEST" | cut -c1-16)-gapfill${DEVICE_KIT_GAPFILL:-1}
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then say "   prefix $R is up to date"; return; fi
  rm -rf "$R" && mkdir -p "$R"
  local f fn pkg
  while read -r fn _; do
    extract_deb "$DEBS/$fn" "$R"
  done < <(grep -v '^#' "$MANIFEST")
  # absolute symlinks (Debian's /usr/lib/.../libhdf5.so -> /usr/lib/...) point into the prefix instead
  while IFS= read -r -d '' f; do
    local t; t=$(readlink "$f")
    case $t in /*) ln -sfn "$R$t" "$f" ;; esac
  done < <(find "$R" -type l -print0)
  # pkg-config files name /usr: make them name the prefix (no sysroot tricks, nothing filtered as system)
  while IFS= read -r -d '' f; do
    [ -L "$f" ] && continue
    sed -i -e "s#=/usr\$#=$R/usr#" -e "s#\([=[:space:]]\|-[IL]\|-Wl,\)/usr/#\1$R/usr/#g" "$f"
  done < <(find "$R/usr" -name '*.pc' -print0)
  # so do the MCA parameter files (Debian's PMIx names its component directory there)
  for f in "$R"/usr/lib/x86_64-linux-gnu/pmix2/share/pmix-mca-params.conf "$R"/etc/openmpi/openmpi-mca-params.conf; do
    [ -f "$f" ] && sed -i "s#\([=[:space:]]\)/usr/#\1$R/usr/#g" "$f"
  done
  # what update-alternatives would have made (the postinst scripts do not run)
  local b=$R/usr/bin
  for f in mpicc mpicxx mpiCC mpic++ mpirun mpiexec; do [ -e "$b/$f.openmpi" ] && ln -sfn "$f.openmpi" "$b/$f"; done
  [ -e "$b/pkg-config" ] || ln -sfn pkgconf "$b/pkg-config"
  # gap filling: a carried library that is no part of what we build against (libcurl, libssl, ...) gives
  # way to the machine's own copy of the same soname, so programs of the machine keep their newer one
  if [ "${DEVICE_KIT_GAPFILL:-1}" = 1 ] && command -v ldconfig >/dev/null; then
    local have; have=$(ldconfig -p 2>/dev/null | awk '/x86-64/{print $1}' | sort -u)
    while read -r fn _; do
      pkg=${fn%%_*}
      [[ $pkg =~ $CORE_RE ]] && continue
      while read -r f; do
        f=${f#./}
        case $f in usr/lib/x86_64-linux-gnu/*.so.*|lib/x86_64-linux-gnu/*.so.*) ;; *) continue ;; esac
        [ -e "$R/$f" ] || continue
        if grep -qx "$(basename "$f")" <<< "$have"; then
          rm -f "$R/$f"; echo "   using the machine's $(basename "$f") (not $pkg's)" >> "$LOG"
        fi
      done < <(deb_files "$DEBS/$fn")
    done < <(grep -v '^#' "$MANIFEST")
  fi
  echo "$want" > "$stamp"
}

kit_env() { # the environment that makes CMake, the compilers and mpirun use the prefix
  local L=$R/usr/lib/x86_64-linux-gnu
  export PATH="$R/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$L/openmpi/lib:$L/hdf5/openmpi:$L/openblas-pthread:$L/pmix2/lib:$L:$R/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG_PATH="$L/pkgconfig:$L/openmpi/lib/pkgconfig:$L/openblas-pthread/pkgconfig:$R/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export CMAKE_PREFIX_PATH="$R/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  # Open MPI and PMIx built for /usr, relocated: their install directories (components, help files,
  # wrapper data) follow these two
  export OPAL_PREFIX="$R/usr" OPAL_SYSCONFDIR="$R/etc/openmpi"
  local P=$L/pmix2
  export PMIX_PREFIX="$P" PMIX_EXEC_PREFIX="$P" PMIX_LIBDIR="$P/lib" PMIX_PKGLIBDIR="$P/lib/pmix" PMIX_DATAROOTDIR="$P/share" \
         PMIX_DATADIR="$P/share" PMIX_PKGDATADIR="$P/share/pmix" PMIX_SYSCONFDIR="$P/share" PMIX_INCLUDEDIR="$P/include" \
         PMIX_BINDIR="$P/bin" PMIX_MCA_mca_base_component_path="$P/lib/pmix"
  # one node over shared memory: the transports PRUNE left out are not even tried; run as root (the
  # device machine's user), more ranks than cores, and no ssh (local ranks only)
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_osc=^ucx,pt2pt OMPI_MCA_mtl=^ofi,psm,psm2
  export OMPI_MCA_mca_base_component_show_load_errors=0 OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_plm_rsh_agent=false OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}

missing_libs() { # missing_libs FILE...: 'FILE: libX.so.N' for every dependency the loader cannot find
  local f
  for f in "$@"; do
    ldd "$f" 2>/dev/null | awk -v f="${f#$R/}" '/not found/{print f ": " $1}'
  done
}
check_prefix() { # the libraries and programs we use load with the prefix and the machine alone
  local L=$R/usr/lib/x86_64-linux-gnu files=() f
  for f in "$R"/usr/bin/{orterun,orted,opal_wrapper,ompi_info,pkgconf} "$L"/openmpi/lib/lib{mpi,open-rte,open-pal}.so.40 \
           "$L"/libhdf5_openmpi.so.103 "$L"/openblas-pthread/libopenblas.so.0 "$L"/libcjson.so.1 "$L"/libinih.so.1 \
           "$L"/libcmocka.so.0 "$L"/libpmix.so.2 "$L"/pmix2/lib/pmix/*.so "$L"/openmpi/lib/openmpi3/*.so; do
    [ -e "$f" ] && files+=("$(readlink -f "$f")")
  done
  # the components that need a pruned transport library are expected not to load
  missing_libs "${files[@]}" | grep -v -E ': (libucp|libucs|libuct|libucm|libfabric|libibverbs|libpsm_infinipath|libpsm2|libnl-3|libnl-route-3|librdmacm)\.so' || true
}

run_kit() {
  local OUTD=${1:?usage: device-kit.sh run OUT}
  mkdir -p "$OUTD"; OUTD=$(cd "$OUTD" && pwd)
  LOG=$OUTD/log.txt STEPS_CSV=$OUTD/steps.csv
  : > "$LOG"; echo "step,status,seconds,note" > "$STEPS_CSV"
  local budget=${DEVICE_KIT_BUDGET:-530} work=${DEVICE_KIT_WORK:-/tmp/mpiddp-device-kit}
  local deadline=$((T0 + budget)) rc_final=0 cut=0
  R=$work/root
  local B=$work/build
  say "device-kit run: $(hostname) $(date -u +%FT%TZ), $(nproc) cores, budget ${budget} s, prefix $R, build $B"

  step unpack
  [ -f "$MANIFEST" ] || die "no $MANIFEST: run 'scripts/device-kit.sh fetch' on a machine with network first, then carry .device-kit"
  local f
  while read -r f _; do [ -f "$DEBS/$f" ] || die "$DEBS/$f is missing: fetch again (and carry .device-kit)"; done < <(grep -v '^#' "$MANIFEST")
  unpack
  kit_env
  local miss; miss=$(check_prefix)
  if [ -n "$miss" ]; then
    say "$miss"
    step_end FAILED "libraries neither carried nor on this machine (add their Debian packages to DEVICE_KIT_EXTRA and fetch again)"
    die "the prefix does not load: see above"
  fi
  step_end ok "$(grep -vc '^#' "$MANIFEST") packages"

  step configure
  local have_gpu=0 cc="" arch cuda=OFF ncclh=""
  if [ -e /dev/nvidia0 ] && nvidia-smi -L >/dev/null 2>&1; then have_gpu=1; fi
  if [ $have_gpu = 1 ]; then cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .'); fi
  # the local GPU's architecture, as machine code only (Hopper: sm_90, HOPPER.md); without a GPU, Hopper
  arch=${cc:-90}-real
  local nvcc; nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
  if [ -n "$nvcc" ]; then
    cuda=ON
    # NCCL: the CUDA toolkit's own, else the NCCL wheel beside PyTorch (libnccl.so.2 only: link names added)
    local cudainc; cudainc=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
    if ! ls "$cudainc"/include/nccl.h "$cudainc"/targets/*/include/nccl.h >/dev/null 2>&1 && [ -z "${NCCL_HOME:-}" ]; then
      ncclh=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
      if [ -n "$ncclh" ] && [ -f "$ncclh/include/nccl.h" ]; then
        mkdir -p "$work/nccl/lib"; ln -sfn "$ncclh/include" "$work/nccl/include"
        local so; so=$(ls "$ncclh"/lib/libnccl.so* | head -1)
        ln -sfn "$so" "$work/nccl/lib/libnccl.so"; ln -sfn "$so" "$work/nccl/lib/libnccl.so.2"
        export NCCL_HOME=$work/nccl
      fi
    fi
  fi
  say "   GPU: $([ $have_gpu = 1 ] && nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | head -1 || echo none); CUDA backend $cuda (${nvcc:-no nvcc}), architectures $arch, NCCL_HOME=${NCCL_HOME:-toolkit}"
  local gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  [ -f "$B/CMakeCache.txt" ] && ! grep -q "^CMAKE_GENERATOR:INTERNAL=${gen[1]:-Unix Makefiles}\$" "$B/CMakeCache.txt" && rm -rf "$B"
  if ! logrun cmake -S "$REPO" -B "$B" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DMPIDDP_CUDA=$cuda \
        ${nvcc:+-DCMAKE_CUDA_COMPILER="$nvcc"} -DMPIDDP_CUDA_ARCHITECTURES="$arch" \
        -DMPI_C_COMPILER="$R/usr/bin/mpicc.openmpi" -DMPIEXEC_EXECUTABLE="$R/usr/bin/orterun" \
        -DPKG_CONFIG_EXECUTABLE="$R/usr/bin/pkgconf" -DMPIDDP_TESTS=ON -DMPIDDP_BENCHMARKS=ON; then
    tail -30 "$LOG"; step_end FAILED; die "cmake failed (the log: $LOG)"
  fi
  grep -E "mpiddp: CUDA backend|Found MPI_C|Checking for module|Found .*hdf5|  Found" "$LOG" | tail -12 | sed 's/^/   /'
  step_end ok "CUDA $cuda, $arch"

  step build
  if ! logrun cmake --build "$B" -j"$(nproc)"; then
    grep -E "error|Error" "$LOG" | tail -20; step_end FAILED; die "build failed (the log: $LOG)"
  fi
  miss=$(missing_libs "$B/mpiddp" "$B"/libmpiddp_cuda.so "$B"/tests/test_cuda_backend 2>/dev/null | grep -v ': libcuda.so' || true)
  [ -z "$miss" ] || { say "$miss"; step_end FAILED "unresolved libraries"; die "built programs do not load"; }
  step_end ok "$(ls "$B"/libmpiddp_cuda.so >/dev/null 2>&1 && echo "with the CUDA plugin" || echo "CPU only")"

  step "cpu smoke: mpirun -np 2 env/synth/train"
  local sm=$work/smoke; rm -rf "$sm"; mkdir -p "$sm"
  if logrun mpirun -np 2 "$B/mpiddp" env --device cpu &&
     logrun mpirun -np 2 "$B/mpiddp" synth --out "$sm/t" --samples 400 --dim 8 --classes 3 --shards 2 --seed 1 &&
     logrun mpirun -np 2 "$B/mpiddp" synth --out "$sm/v" --samples 100 --dim 8 --classes 3 --shards 1 --seed 1 --first-id 9000 &&
     logrun mpirun -np 2 "$B/mpiddp" train --device cpu --train "$sm/t" --val "$sm/v" --out "$sm/run" --epochs 1 --batch-size 16 --hidden 16 --no-progress; then
    step_end ok "$(grep -h '^rank=0 ' "$LOG" | tail -1 | grep -o 'launcher=[^ ]*\|mpi="[^"]*"\|hdf5=[^ ]*' | tr '\n' ' ')"
  else
    tail -20 "$LOG"; step_end FAILED; rc_final=1
  fi

  if [ $have_gpu = 0 ]; then
    step "gpu"
    step_end skipped "no NVIDIA GPU"
    write_report "$OUTD" "$B" "no NVIDIA GPU on $(hostname): built and smoke-tested on the CPU only"
    say "device-kit: no NVIDIA GPU here (no /dev/nvidia0, or nvidia-smi failed): built, CPU smoke $([ $rc_final = 0 ] && echo passed || echo FAILED); exit 3"
    exit 3
  fi

  if [ "${DEVICE_KIT_BENCH:-1}" = profile ]; then   # the kernels under ncu, no checks (the first call ran them)
    step "profile (benchmarks/profile_gpu.sh)"
    local rc_p=0 left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt 30 ]; then rc_p=4   # (timeout 0 would set no limit at all)
    else
      MPIDDP_DEADLINE=$deadline timeout -k 5 "$left" bash "$REPO/benchmarks/profile_gpu.sh" "$OUTD" "$B" 2>&1 | tee -a "$LOG" ||
        rc_p=${PIPESTATUS[0]}
    fi
    case $rc_p in
      0) step_end ok "$(grep -m1 -o 'No hardware counters[^:]*' "$OUTD/profile.md" 2>/dev/null || echo "counters read")" ;;
      4|124|137) step_end "cut short" "the budget ran out: see profile.md" ;;
      *) step_end FAILED "exit $rc_p"; rc_final=1 ;;
    esac
    write_report "$OUTD" "$B" ""
    say "device-kit: profile $([ $rc_final = 0 ] && echo "finished" || echo FAILED): $OUTD/profile.md ($(el) s)"
    exit $rc_final
  fi

  step "gpu-check"
  local bench=1 runbench=1; [ -f "$REPO/benchmarks/run_gpu.sh" ] && bench=0
  [ "${DEVICE_KIT_BENCH:-1}" = 0 ] && bench=0 runbench=0
  [ "${DEVICE_KIT_BENCH:-1}" = kernels ] && bench=0 runbench=1 && export RUN_GPU_ONLY=kernels
  local left=$(( deadline - $(date +%s) ))
  local share=55; [ -n "${RUN_GPU_ONLY:-}" ] && share=90   # run_gpu.sh gets the rest (a tenth for the kernel table alone)
  if [ "$runbench" = 1 ] && [ -f "$REPO/benchmarks/run_gpu.sh" ]; then left=$(( left * share / 100 )); fi
  local rc_gc=0 verdict
  BUILD=$B GPU_CHECK_NO_BUILD=1 GPU_CHECK_NO_DEPS=1 REPORT=$LOG GPU_CHECK_APPEND=1 GPU_CHECK_CSV_DIR=$OUTD \
    GPU_CHECK_BENCH=$bench GPU_CHECK_DEADLINE=$(( $(date +%s) + left )) bash "$REPO/scripts/gpu-check.sh" || rc_gc=$?
  verdict=$(. "$REPO/scripts/steps.sh" && steps_verdict $rc_gc "$LOG")
  step_end "${verdict%%|*}" "${verdict#*|}"
  case ${verdict%%|*} in FAILED) rc_final=1 ;; "cut short") cut=1 ;; esac

  step "benchmarks (benchmarks/run_gpu.sh)"
  if [ "$runbench" = 0 ]; then
    step_end skipped "DEVICE_KIT_BENCH=0"
  elif [ -f "$REPO/benchmarks/run_gpu.sh" ]; then
    left=$(( deadline - $(date +%s) ))
    if [ $left -lt 20 ]; then
      step_end "not run" "no time left"; cut=1
    elif MPIDDP_KIT=1 MPIDDP_DEADLINE=$deadline timeout -k 5 "$left" bash "$REPO/benchmarks/run_gpu.sh" "$OUTD" "$B" 2>&1 | tee -a "$LOG"; then
      step_end ok
    else
      local rc_b=${PIPESTATUS[0]}
      if [ "$rc_b" = 124 ] || [ "$rc_b" = 137 ] || [ "$rc_b" = 4 ]; then
        step_end "cut short" "the budget ran out: see the steps table of gpu_bench.md"; cut=1
      else step_end FAILED "exit $rc_b"; rc_final=1; fi
    fi
  else
    step_end skipped "benchmarks/run_gpu.sh does not exist yet"
  fi
  write_report "$OUTD" "$B" ""
  local verdict="all passed"
  [ "$cut" = 1 ] && verdict="passed what ran; some steps not run (the budget ran out)"
  [ $rc_final = 0 ] || verdict=FAILURES
  say "device-kit: $verdict: $OUTD/report.md ($(el) s)"
  exit $rc_final
}

write_report() { # write_report OUT BUILD NOTE: report.md; at most 8 files under OUT
  local o=$1 b=$2 note=$3 r=$1/report.md
  {
    echo "# mpiddp on a lent GPU: device-kit report"
    echo
    echo "- date: $(date -u +%FT%TZ); host: $(hostname); $(nproc) cores; kernel $(uname -r)"
    if nvidia-smi -L >/dev/null 2>&1; then
      echo "- GPU: $(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader | head -1)"
    fi
    echo "- CUDA: $( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null) | grep -o 'release [0-9.]*' || echo 'no nvcc')"
    echo "- kit: $(grep -vc '^#' "$MANIFEST") Debian packages ($(sed -n 's/^# device-kit //p' "$MANIFEST")); Open MPI $(ompi_info --version 2>/dev/null | head -1 | grep -o '[0-9][0-9.]*' || echo '?'), HDF5 $(pkg-config --modversion hdf5-openmpi 2>/dev/null || echo '?')"
    echo "- build: $b ($(grep -o 'MPIDDP_CUDA_ARCHITECTURES:STRING=.*' "$b/CMakeCache.txt" 2>/dev/null | cut -d= -f2))"
    [ -n "$note" ] && { echo; echo "**$note**"; }
    echo
    echo "| step | result | seconds | note |"
    echo "|---|---|---|---|"
    tail -n +2 "$STEPS_CSV" | awk -F, '{n = $4; for (i = 5; i <= NF; i++) n = n "," $i; print "| " $1 " | " $2 " | " $3 " | " n " |"}'
    if grep -q '^\(ok\|FAILED\|TIMEOUT\|SKIPPED\|NOT RUN\)' "$LOG"; then
      echo; echo "## gpu-check"; echo; echo '```'
      grep -E '^(== |ok|FAILED|TIMEOUT|SKIPPED|NOT RUN|PASS|FAIL|gpu-check:|mpiddp |  )' "$LOG" | grep -v '^== step' | cut -c1-220 | head -150
      echo '```'
    fi
    if grep -q '^FAILED' "$LOG"; then
      echo; echo "## first failure, context"; echo; echo '```'
      grep -n -m1 -B40 '^FAILED' "$LOG" | cut -c1-220 | tail -40
      echo '```'
    fi
    echo; echo "Files: $(cd "$o" && find . -type f | sed 's#^\./##' | sort | tr '\n' ' ')"
  } > "$r"
  # the device tool returns 8 files: keep report, steps, log and the first CSVs; fold the rest into one
  local files; mapfile -t files < <(cd "$o" && find . -type f ! -name report.md ! -name steps.csv ! -name log.txt | sed 's#^\./##' | sort)
  if [ $(( ${#files[@]} + 3 )) -gt 8 ]; then
    local extra=("${files[@]:4}")
    (cd "$o" && tar czf extra-files.tar.gz "${extra[@]}" && rm -f "${extra[@]}")
    echo "More than 8 files: ${extra[*]} are in extra-files.tar.gz" >> "$r"
  fi
}

case "${1:-}" in
  fetch) fetch ;;
  run) shift; run_kit "$@" ;;
  *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
