# The device kit (scripts/device-kit.sh) where its packages are absent, as on a lent GPU machine: fetch is
# idempotent (a second run downloads nothing) and within 56 MiB; then, in a mount namespace whose /usr
# hides every installed Debian package the kit does not assume on the GPU machine (only Debian's required
# packages, build-essential, and cmake + ninja to drive the build remain; the CUDA toolkit in /usr/local
# stays), `device-kit.sh run` unpacks the .debs into a private prefix, configures (MPI, parallel HDF5,
# OpenBLAS, cJSON, inih, cmocka, PMIx all from the prefix) and builds with the CUDA backend, passes its
# CPU smoke test under mpirun, and exits 3 saying "no NVIDIA GPU"; every library the prefix's programs
# and the build's outputs load comes from the prefix or from a package the kit assumes. Needs root (mount
# namespace, overlayfs); skips (77) only where the kit was never fetched and Debian's mirror is unreachable.
: "${MPIDDP:=unused}" "${SRC:=$(cd "$(dirname "$0")/../.." && pwd)}" "${WORK:=/tmp/mpiddp-device-kit-test}"
. "$(dirname "$0")/lib.sh"
KITSH="$SRC/scripts/device-kit.sh"
[ "$(id -u)" = 0 ] || fail "needs root (unshare -m, overlayfs)"
command -v unshare >/dev/null && grep -qw overlay /proc/filesystems || fail "needs unshare and overlayfs"

# 1. fetch, twice: the second run is offline and downloads nothing
start=$(date +%s)
if ! bash "$KITSH" fetch > fetch1.txt 2>&1; then
  cat fetch1.txt
  if [ ! -f "$SRC/.device-kit/manifest.txt" ] && ! timeout 10 bash -c 'exec 3<>/dev/tcp/deb.debian.org/80' 2>/dev/null; then
    echo "SKIP: .device-kit/ not fetched and deb.debian.org unreachable"; exit 77
  fi
  fail "device-kit.sh fetch failed"
fi
cat fetch1.txt
bash "$KITSH" fetch > fetch2.txt 2>&1 || { cat fetch2.txt; fail "second fetch failed"; }
grep -q "up to date (nothing downloaded)" fetch2.txt || { cat fetch2.txt; fail "second fetch was not a no-op"; }
bytes=$(grep -v '^#' "$SRC/.device-kit/manifest.txt" | awk '{s += $2} END {print s}')
[ "$bytes" -le $((56 * 1024 * 1024)) ] || fail "kit is $bytes bytes, over 56 MiB"
[ "$(du -sb "$SRC/.device-kit" | cut -f1)" -le $((57 * 1024 * 1024)) ] || fail ".device-kit holds more than the debs (it is carried)"
pass "fetch: $(grep -vc '^#' "$SRC/.device-kit/manifest.txt") packages, $bytes bytes; second run offline ($(( $(date +%s) - start )) s)"

# 2. what stays visible: the packages the kit assumes, and what drives the build here
mapfile -t base < "$SRC/.device-kit/base.txt"
keep=$(apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
         --no-enhances cmake ninja-build 2>/dev/null | grep -v '^ ' | tr -d '<>' | sort -u)
printf '%s\n' "${base[@]}" $keep | sed 's/:.*//' | sort -u > visible.txt
dpkg-query -W -f='${Package}\n' | sed 's/:.*//' | sort -u > installed.txt
comm -23 installed.txt visible.txt > hidden.txt
for p in libopenmpi3 libhdf5-openmpi-103-1 libopenblas0-pthread libcjson1 libinih1 libcmocka0 libpmix2; do
  grep -qx "$p" installed.txt && { grep -qx "$p" hidden.txt || fail "$p would stay visible (it is in the base or cmake's closure)"; }
done
# whiteouts (0/0 character devices) in an overlay upper layer for every file of a hidden package under
# /usr; its files under /etc get /dev/null bound over them; basefiles.txt: the files of the packages the
# kit assumes (every library the kit's programs load must be one of them, or the prefix's)
up="$WORK/ovl/upper"; mkdir -p "$up" "$WORK/ovl/work"
xargs dpkg -L < hidden.txt > hidden-files.txt 2>/dev/null || true
printf '%s\n' "${base[@]}" | xargs dpkg -L > base-files.txt 2>/dev/null || true
n=$($PY - "$up" <<'PY'
import os, stat, sys
up = sys.argv[1]
def norm(f):
    return "/usr" + f if f.split("/")[1] in ("bin", "sbin", "lib", "lib64") else f
n = 0
with open("hidden-etc.txt", "w") as etc:
    for f in sorted(set(norm(l.strip()) for l in open("hidden-files.txt") if l.startswith("/"))):
        if f.startswith("/usr/") and (os.path.islink(f) or os.path.isfile(f)):
            w = os.path.join(up, f[5:])
            os.makedirs(os.path.dirname(w), exist_ok=True)
            if not os.path.lexists(w):
                os.mknod(w, stat.S_IFCHR | 0o600, os.makedev(0, 0)); n += 1
        elif f.startswith("/etc/") and os.path.isfile(f) and not os.path.islink(f):
            etc.write(f + "\n")
with open("basefiles.txt", "w") as out:
    out.write("\n".join(sorted({os.path.realpath(norm(l.strip())) for l in open("base-files.txt")
                                 if l.startswith("/") and os.path.isfile(l.strip())})) + "\n")
print(n)
PY
)
pass "namespace: $(wc -l < hidden.txt) of $(wc -l < installed.txt) packages hidden ($n files), $(wc -l < visible.txt) names visible"

# 3. inside: the system's MPI/HDF5/BLAS are gone; the kit builds, smoke-tests on the CPU and exits 3
cat > inside.sh <<'EOF'
set -uo pipefail
mount --make-rprivate /
mount -t overlay overlay -o lowerdir=/usr,upperdir="$WORK/ovl/upper",workdir="$WORK/ovl/work" /usr || exit 90
while read -r f; do mount --bind /dev/null "$f"; done < "$WORK/hidden-etc.txt"
ldconfig -C "$WORK/ld.so.cache" && mount --bind "$WORK/ld.so.cache" /etc/ld.so.cache
hash -r
for x in mpicc mpirun pkg-config h5pcc; do command -v $x >/dev/null && { echo "LEAK: $x is visible: $(command -v $x)"; exit 91; }; done
ldconfig -p | grep -E 'libmpi\.so|libhdf5_openmpi|libopenblas|libcjson|libinih|libcmocka|libpmix' && { echo "LEAK: libraries visible"; exit 91; }
ls /usr/include/mpi.h /usr/include/cjson/cJSON.h /usr/include/ini.h /usr/include/cmocka.h 2>/dev/null && { echo "LEAK: headers visible"; exit 91; }
echo "inside: no system MPI, HDF5, OpenBLAS, cJSON, inih, cmocka or PMIx"
start=$(date +%s)
DEVICE_KIT_WORK="$WORK/kit" DEVICE_KIT_GAPFILL=0 bash "$SRC/scripts/device-kit.sh" run "$WORK/kitout" > "$WORK/run.txt" 2>&1
rc=$?
echo "run: exit $rc after $(( $(date +%s) - start )) s"
# every library that the prefix's programs and libraries and the build's outputs load
R="$WORK/kit/root"; L=$R/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH="$L/openmpi/lib:$L/hdf5/openmpi:$L/openblas-pthread:$L/pmix2/lib:$L"
for f in $(find "$R/usr/bin" "$L" -type f \( -perm -u+x -o -name '*.so*' \)) "$WORK/kit/build/mpiddp" "$WORK/kit/build"/*.so \
         "$WORK/kit/build/tests/test_cuda_backend" "$WORK/kit/build/benchmarks/bench_train"; do
  [ -f "$f" ] && head -c 4 "$f" | grep -q ELF || continue   # one write: no early-exit race (no qgrep in this script)
  ldd "$f" 2>/dev/null | awk -v f="$f" '/=> \// {print f, $3} /not found/ {print f, "NOTFOUND:" $1}'
done > "$WORK/ldd.txt"
exit $rc
EOF
start=$(date +%s)
set +e
WORK="$WORK" SRC="$SRC" unshare -m bash inside.sh > inside.txt 2>&1
rc=$?
set -e
cat inside.txt; echo "--- run output:"; cat "$WORK/run.txt"
[ "$rc" = 3 ] || fail "device-kit.sh run exited $rc inside the namespace, expected 3"
grep -q "no NVIDIA GPU" "$WORK/run.txt" || fail "no 'no NVIDIA GPU' line"
grep -q "^== step build" "$WORK/run.txt" && grep -q "build: ok" "$WORK/run.txt" || fail "the build step did not pass"
grep -q "cpu smoke.*: ok" "$WORK/run.txt" || fail "the CPU smoke test did not pass"
grep -q "Sorry!\|couldn't open the help file\|unable to open\|mca_base_component_repository_open" "$WORK/kitout/log.txt" && { grep -m3 -A4 "Sorry!\|couldn't open\|unable to open" "$WORK/kitout/log.txt"; fail "Open MPI or PMIx did not find its relocated files"; }
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  [ -f "$WORK/kit/build/libmpiddp_cuda.so" ] || fail "nvcc is here but the CUDA plugin was not built"
  grep -q "^MPIDDP_CUDA_ARCHITECTURES:STRING=90-real" "$WORK/kit/build/CMakeCache.txt" || fail "not built for sm_90 without a GPU"
fi
for f in report.md steps.csv log.txt; do [ -s "$WORK/kitout/$f" ] || fail "kitout/$f missing"; done
[ "$(find "$WORK/kitout" -type f | wc -l)" -le 8 ] || fail "more than 8 files under OUT"
grep -q "pkg-config.*hdf5-openmpi\|Checking for module 'hdf5-openmpi'" "$WORK/kitout/log.txt" || fail "HDF5 not found through hdf5-openmpi"
grep -q "$WORK/kit/root" "$WORK/kit/build/CMakeCache.txt" || fail "CMake did not take the prefix"
grep -E '^(HDF5|OPENBLAS|CJSON|INIH|CMOCKA|PMIX)_LINK_LIBRARIES:INTERNAL|^MPI_C_LIB_NAMES|^MPI_mpi_LIBRARY' "$WORK/kit/build/CMakeCache.txt" > found.txt || true
grep -v -q "$WORK/kit/root" <(grep -E '^(HDF5|OPENBLAS|CJSON|INIH|PMIX)_LINK_LIBRARIES' found.txt | grep -v '=$') && { cat found.txt; fail "a dependency was found outside the prefix"; }
grep -q '^PMIX_FOUND:INTERNAL=1' "$WORK/kit/build/CMakeCache.txt" || fail "PMIx not found in the prefix"
# the loader's answers: from the prefix, a package the kit assumes, or the CUDA toolkit; nothing missing
# but the transports the kit prunes (and libcuda, which only a GPU machine has)
bad=$(awk -v R="$WORK/kit/root" -v W="$WORK/kit/build" '
  $2 ~ /^NOTFOUND:/ { lib = substr($2, 10); if (lib !~ /^(libucp|libucs|libuct|libucm|libfabric|libibverbs|libpsm_infinipath|libpsm2|libnl-3|libnl-route-3|librdmacm|libcuda)\.so/ && $1 !~ /fortran|_cpp|hl_cpp|mpi_mpifh|mpi_usempi|liboshmem|mca_.*(ucx|ofi|psm|openib|netlink)/) print; next }
  { print $2 }' "$WORK/ldd.txt" | sort -u | while read -r lib rest; do
    case $lib in "$WORK"/kit/root/*|/usr/local/cuda*) continue ;; esac
    [ -n "$rest" ] && { echo "$lib $rest"; continue; }
    grep -qx "$(readlink -f "$lib")" basefiles.txt || echo "$lib"
  done || true)
[ -z "$bad" ] || { echo "$bad" | head -30; fail "libraries resolved outside the prefix and the assumed packages, or missing"; }
pass "kit run without the packages: built (CUDA plugin for sm_90), CPU smoke ok, exit 3 'no NVIDIA GPU', $(wc -l < "$WORK/ldd.txt") library loads checked ($(( $(date +%s) - start )) s)"
