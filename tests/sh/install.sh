# `cmake --install` of this build into a fresh prefix: the CLI, libmpiddp.so (SONAME, versioned names), the header,
# the CMake package and mpiddp.pc, nothing else (no tests, benchmarks), no file naming the build or source tree and
# no RUNPATH into them; the installed CLI runs with a bare environment. examples/user_model.c built out of tree
# with find_package(mpiddp) and with pkg-config + mpicc trains at np 1 and 2 on the installed library, and the two
# builds end with bitwise equal checkpoints; the installed library finds the GPU plugin beside itself.
. "$(dirname "$0")/lib.sh"
BUILD=$(cd "$(dirname "$MPIDDP")" && pwd)
SRCDIR=$(cd "$SRC" && pwd)
# the prefix lies outside the build tree, so that a path into it anywhere under the prefix is the install's fault
P=$(mktemp -d "${TMPDIR:-/tmp}/mpiddp-install.XXXXXX")
trap 'rm -rf "$P"' EXIT
case $P/ in "$BUILD"/* | "$SRCDIR"/*) fail "the temporary prefix $P lies inside the build or source tree" ;; esac
expect_rc 0 cmake --install "$BUILD" --prefix "$P"

# 1. what is installed: exactly these files (the plugin where the build has one)
lib=$(find "$P" -name libmpiddp.so)
[ -n "$lib" ] || fail "no libmpiddp.so installed: $(cd "$P" && find . -type f | sort | tr '\n' ' ')"
L=$(dirname "$lib")
LD=${L#"$P"/}
want="bin/mpiddp include/mpiddp.h $LD/libmpiddp.so $LD/cmake/mpiddp/mpiddpConfig.cmake
$LD/cmake/mpiddp/mpiddpConfigVersion.cmake $LD/cmake/mpiddp/mpiddpTargets.cmake $LD/pkgconfig/mpiddp.pc"
for f in $want; do [ -e "$P/$f" ] || fail "not installed: $f"; done
[ ! -e "$BUILD/libmpiddp_cuda.so" ] || [ -e "$L/libmpiddp_cuda.so" ] || fail "the build's GPU plugin is not installed"
extra=$(cd "$P" && find . \( -type f -o -type l \) | sed 's|^\./||' | grep -Ev "^(bin/mpiddp|include/mpiddp\.h|$LD/libmpiddp\.so(\.[0-9]+)*|$LD/libmpiddp_cuda\.so|$LD/cmake/mpiddp/mpiddp(Config|ConfigVersion|Targets|Targets-[a-z]+)\.cmake|$LD/pkgconfig/mpiddp\.pc)$" || true)
[ -z "$extra" ] || fail "installed beyond the CLI, library, header and package files: $extra"
# the shared library's SONAME carries the version and names an installed file; libmpiddp.so links to it
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ $soname =~ ^libmpiddp\.so\.[0-9]+ ]] || fail "libmpiddp.so SONAME '$soname' (expected libmpiddp.so.VERSION)"
[ -e "$L/$soname" ] || fail "SONAME $soname is not installed in $LD"
[ "$(readlink -f "$lib")" = "$(readlink -f "$L/$soname")" ] || fail "libmpiddp.so and $soname are different files"
ver=$(sed -n 's/^Version: //p' "$L/pkgconfig/mpiddp.pc")
[ -e "$L/libmpiddp.so.$ver" ] || fail "no libmpiddp.so.$ver (mpiddp.pc says version $ver)"
# it exports exactly the functions the installed header declares (names followed by a parenthesis), no internal one
nm -D --defined-only "$lib" | awk '$2 == "T" {print $3}' | sort -u > exported.txt
grep -oE '\bddp_[a-z0-9_]+\(' "$P/include/mpiddp.h" | tr -d '(' | sort -u > declared.txt
[ -s declared.txt ] || fail "no function found in $P/include/mpiddp.h"
cmp -s exported.txt declared.txt ||
  fail "libmpiddp.so's functions differ from mpiddp.h's: $(diff declared.txt exported.txt | grep '^[<>]' | head -5 | tr '\n' ' ')"

# 2. nothing installed points into the build or source tree: text files, RUNPATHs, resolved libraries
if grep -rlF -e "$BUILD" -e "$SRCDIR/" "$P/include" "$L/cmake" "$L/pkgconfig" > paths.txt; then
  fail "installed files name the build or source tree: $(cat paths.txt)"
fi
for f in "$P/bin/mpiddp" "$L"/libmpiddp*.so*; do
  [ -L "$f" ] && continue
  rp=$(readelf -d "$f" | grep -E '\((RPATH|RUNPATH)\)' || true)
  case $rp in *"$BUILD"* | *"$SRCDIR"*) fail "$f: RUNPATH into the build tree: $rp" ;; esac
  # no source path in the strings the code uses (__FILE__ in error messages); debug info may keep it, for debuggers
  if readelf -p .rodata "$f" 2> /dev/null | grep -F "$SRCDIR/" > rodata.txt; then
    fail "$f holds source-tree paths in its read-only data: $(head -3 rodata.txt | tr '\n' ' ')"
  fi
  ldd "$f" > ldd.txt 2>&1 || fail "ldd $f: $(cat ldd.txt)"
  ! grep -F -e 'not found' -e "$BUILD" ldd.txt || fail "$f resolves libraries missing or in the build tree"
done
# the installed CLI from the prefix alone: no PATH or LD_LIBRARY_PATH into the build tree, cwd outside it
expect_rc 0 env -i PATH=/usr/bin:/bin HOME="$P" bash -c "cd '$P' && '$P/bin/mpiddp' --version"
[ -n "$OUT" ] || fail "installed mpiddp --version printed nothing"
expect_rc 0 env -u LD_LIBRARY_PATH mpirun -np 2 --oversubscribe "$P/bin/mpiddp" env --device cpu
[ "$(printf '%s\n' "$OUT" | grep -c '^rank=')" = 2 ] || fail "installed mpiddp env at np 2: $OUT"
"$P/bin/mpiddp" synth --out tr --samples 200 --shards 4 --dim 6 --classes 3 >/dev/null
"$P/bin/mpiddp" synth --out va --samples 80 --shards 1 --dim 6 --classes 3 --first-id 100000 >/dev/null

# 3. examples/user_model.c against the install: CMake's find_package, then pkg-config + mpicc, the same flags
expect_rc 0 cmake -S "$SRC/examples" -B ex_cmake -DCMAKE_PREFIX_PATH="$P" -DCMAKE_BUILD_TYPE=Release
expect_rc 0 cmake --build ex_cmake
export PKG_CONFIG_PATH=$L/pkgconfig
[ "$(pkg-config --modversion mpiddp)" = "$ver" ] || fail "pkg-config --modversion mpiddp: $(pkg-config --modversion mpiddp)"
read -r -a pc_cflags <<< "$(pkg-config --cflags mpiddp)"
read -r -a pc_libs <<< "$(pkg-config --libs mpiddp)"
expect_rc 0 mpicc -O3 -DNDEBUG "${pc_cflags[@]}" "$SRC/examples/user_model.c" -o ex_pc "${pc_libs[@]}" -lm \
  -Wl,-rpath,"$(readlink -f "$(pkg-config --variable=libdir mpiddp)")"
for exe in ex_cmake/example_user_model ex_pc; do
  got=$(ldd "$exe" | awk '$1 ~ /^libmpiddp\.so/ {print $3}')
  [ -n "$got" ] && [ "$(readlink -f "$got")" = "$(readlink -f "$lib")" ] ||
    fail "$exe does not load the installed libmpiddp.so: $(ldd "$exe" | grep mpiddp)"
done
for np in 1 2; do
  for b in cmake pc; do
    exe=ex_cmake/example_user_model
    [ $b = pc ] && exe=ex_pc
    expect_rc 0 env -u LD_LIBRARY_PATH mpirun -np $np --oversubscribe "$exe" tr va run_${b}_np$np
    for f in metrics.csv run.json checkpoints/last.h5; do
      [ -s run_${b}_np$np/$f ] || fail "$b build at np $np: no $f"
    done
  done
  acc=$(csv_last run_cmake_np$np/metrics.csv val/acc)
  [ "$acc" = "$(csv_last run_pc_np$np/metrics.csv val/acc)" ] || fail "np $np: val/acc $acc against $(csv_last run_pc_np$np/metrics.csv val/acc)"
  awk -v a="$acc" 'BEGIN{exit !(a >= 0.9)}' || fail "np $np: user model val/acc $acc"
  $PY "$SRC/tests/py/compare_ckpt.py" run_cmake_np$np/checkpoints/last.h5 run_pc_np$np/checkpoints/last.h5 0 ||
    fail "np $np: the CMake and pkg-config builds' checkpoints are not bitwise equal"
done

# 4. the installed library looks for the GPU plugin beside itself: a plugin there that cannot load is named by its
#    path (where the build has a real plugin, the installed one answers instead)
if [ ! -e "$L/libmpiddp_cuda.so" ]; then
  cat > dev.c <<'EOF'
#include <mpiddp.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    ddp_ctx *ctx;
    ddp_device got;
    char why[160] = "";
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) return 3;
    ddp_status st = ddp_select_device(ctx, DDP_DEVICE_CUDA, &got, why);
    printf("%d %s | %s\n", (int)st, why, ddp_last_error());
    ddp_finalize(ctx);
    return 0;
}
EOF
  expect_rc 0 mpicc "${pc_cflags[@]}" dev.c -o dev "${pc_libs[@]}" -Wl,-rpath,"$L"
  echo "not a shared object" > "$L/libmpiddp_cuda.so"
  expect_rc 0 env -u MPIDDP_CUDA_PLUGIN -u LD_LIBRARY_PATH ./dev
  printf '%s' "$OUT" | qgrep -F "$L/libmpiddp_cuda.so" || fail "the installed library did not try $L/libmpiddp_cuda.so: $OUT"
  rm "$L/libmpiddp_cuda.so"
fi
pass "install into $P: CLI, libmpiddp.so ($soname), header, CMake package, mpiddp.pc; user model via find_package and pkg-config at np 1 and 2 (val/acc $acc)"
