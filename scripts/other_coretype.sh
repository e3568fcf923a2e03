#!/usr/bin/env bash
# other_coretype.sh DEFAULT — prints an OPENBLAS_CORETYPE this CPU can run whose GEMM kernels differ from
# DEFAULT (the family OpenBLAS picked by itself): SkylakeX where AVX-512 exists, else Haswell (AVX2), else
# Sandybridge (AVX), else Prescott. Zen runs the Haswell kernels, so it counts as Haswell.
set -euo pipefail
default=${1:?usage: other_coretype.sh DEFAULT_CORE}
family() { case "$1" in Zen|Haswell) echo Haswell ;; SkylakeX|Cooperlake|SapphireRapids) echo SkylakeX ;; *) echo "$1" ;; esac; }
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
candidates=()
[[ " $flags " == *" avx512f "* ]] && candidates+=(SkylakeX)
[[ " $flags " == *" avx2 "* ]] && candidates+=(Haswell)
[[ " $flags " == *" avx "* ]] && candidates+=(Sandybridge)
candidates+=(Prescott)
for c in "${candidates[@]}"; do
  if [ "$(family "$c")" != "$(family "$default")" ]; then echo "$c"; exit 0; fi
done
echo Prescott
