#!/usr/bin/env bash
# plot_metrics.sh RUNDIR [OUT.png] — turns RUNDIR/metrics.csv into a PNG of the training curves
# (train/val loss, val accuracy and macro-F1 against the global step) with gnuplot.
set -euo pipefail
RUN=${1:?usage: plot_metrics.sh RUNDIR [OUT.png]}
PNG=${2:-$RUN/metrics.png}
CSV=$RUN/metrics.csv
[ -f "$CSV" ] || { echo "plot_metrics: $CSV: no such file" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot_metrics: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 1; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
# one two-column file per metric: step value (rows where the metric is present)
for m in train/loss val/loss val/acc val/macro_f1; do
  awk -F, -v col="$m" 'NR==1{for(i=1;i<=NF;i++) if($i==col) c=i; next} c && $c!="" {print $2, $c}' "$CSV" > "$T/${m//\//_}.dat"
done
gnuplot <<GP
set terminal pngcairo size 1100,450
set output '$PNG'
set datafile separator ' '
set multiplot layout 1,2 title 'mpiddp run: $RUN'
set xlabel 'step'
set ylabel 'loss'
set logscale y
set grid
plot '$T/train_loss.dat' with lines lw 2 title 'train/loss', '$T/val_loss.dat' with linespoints lw 2 pt 7 title 'val/loss'
unset logscale y
set ylabel 'score'
set yrange [0:1.02]
plot '$T/val_acc.dat' with linespoints lw 2 pt 7 title 'val/acc', '$T/val_macro_f1.dat' with linespoints lw 2 pt 5 title 'val/macro\_f1'
unset multiplot
GP
echo "plot: $PNG"
