#!/usr/bin/env bash
# plot_metrics.sh RUNDIR [OUT.png] — turns RUNDIR/metrics.csv into a PNG of the training curves with gnuplot,
# against the global step: train/val loss; val accuracy and macro-F1; the learning rate (the lr column).
# Prints the PNG's path and the curves it drew (a metric without values in the CSV is left out).
set -euo pipefail
RUN=${1:?usage: plot_metrics.sh RUNDIR [OUT.png]}
PNG=${2:-$RUN/metrics.png}
CSV=$RUN/metrics.csv
[ -f "$CSV" ] || { echo "plot_metrics: $CSV: no such file" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot_metrics: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 1; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
# one two-column file per metric: step value (rows where the metric is present)
drawn=()
for m in train/loss val/loss val/acc val/macro_f1 lr; do
  awk -F, -v col="$m" 'NR==1{for(i=1;i<=NF;i++) if($i==col) c=i; next} c && $c!="" {print $2, $c}' "$CSV" > "$T/${m//\//_}.dat"
  [ -s "$T/${m//\//_}.dat" ] && drawn+=("$m")
done
has() { [ -s "$T/$1.dat" ]; }
# one plot command over the curves that have data (gnuplot refuses an empty file)
curves() {
  local out="" spec
  for spec in "$@"; do
    has "${spec%%|*}" || continue
    out+="${out:+, }'$T/${spec%%|*}.dat' ${spec#*|}"
  done
  [ -n "$out" ] && echo "plot $out" || echo "plot NaN notitle"
}
gnuplot <<GP
set terminal pngcairo size 1500,450
set output '$PNG'
set datafile separator ' '
set multiplot layout 1,3 title 'mpiddp run: $RUN' noenhanced
set xlabel 'step'
set grid
set ylabel 'loss'
set logscale y
$(curves "train_loss|with lines lw 2 title 'train/loss' noenhanced" "val_loss|with linespoints lw 2 pt 7 title 'val/loss' noenhanced")
unset logscale y
set ylabel 'score'
set yrange [0:1.02]
set key bottom right
$(curves "val_acc|with linespoints lw 2 pt 7 title 'val/acc' noenhanced" "val_macro_f1|with linespoints lw 2 pt 5 title 'val/macro_f1' noenhanced")
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set key top right
set ylabel 'learning rate'
set format y '%.1e'
$(curves "lr|with steps lw 2 title 'lr' noenhanced")
unset multiplot
GP
echo "plot: $PNG (${drawn[*]})"
