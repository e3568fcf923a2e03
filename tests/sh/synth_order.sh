# synth --task order: the label is the marker that comes first among a sample's rows, so it is decodable
# from the row order (>= 99% here) while a mean over the rows is at chance; the output depends only on
# (seed, id) (identical at 1 and 2 writer ranks); --task class is the default and unchanged; bad --task
# values and --min-rows < --classes are one-line usage errors (exit 2).
. "$(dirname "$0")/lib.sh"
ORD=(--task order --samples 1000 --dim 8 --classes 3 --min-rows 3 --max-rows 12 --shards 3)
synth --out o1 "${ORD[@]}" --seed 9
mpirun_np 2 "$MPIDDP" synth --out o2 "${ORD[@]}" --seed 9 >/dev/null
synth --out o3 "${ORD[@]}" --seed 10
synth --out c0 --samples 300 --dim 8 --classes 3 --min-rows 3 --max-rows 12 --shards 2 --seed 9
synth --out c1 --samples 300 --dim 8 --classes 3 --min-rows 3 --max-rows 12 --shards 2 --seed 9 --task class
"$MPIDDP" inspect o1 | qgrep "samples 1000 .* classes 3" || fail "inspect of the order dataset"
$PY - <<'EOF' || fail "order dataset properties"
import glob, itertools, sys
import h5py, numpy as np

def load(d):
    F, L, S, N, base = [], [], [], [], 0
    for f in sorted(glob.glob(d + "/*.h5")):
        with h5py.File(f, "r") as h:
            F.append(h["features"][()]); L.append(h["labels"][()]); off = h["offsets"][()]
            S.append(off[:-1] + base); N.append(np.diff(off)); base += int(off[-1])
    return np.concatenate(F), np.concatenate(L), np.concatenate(S), np.concatenate(N)

def contents(d):
    out = []
    for f in sorted(glob.glob(d + "/*.h5")):
        with h5py.File(f, "r") as h:
            out.append((f.split("/")[-1], {k: h[k][()] for k in h}, {k: h.attrs[k] for k in h.attrs}))
    return out

def same(a, b):
    A, B = contents(a), contents(b)
    return len(A) == len(B) and all(
        x[0] == y[0] and x[1].keys() == y[1].keys() and x[2].keys() == y[2].keys()
        and all(x[1][k].dtype == y[1][k].dtype and np.array_equal(x[1][k], y[1][k]) for k in x[1])
        and all(np.array_equal(x[2][k], y[2][k]) for k in x[2]) for x, y in zip(A, B))

bad = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok: bad.append(what)

C = 3
F, L, S, N = load("o1")
check(len(L) == 1000 and N.min() >= 3 and N.max() <= 12, "1000 samples of 3..12 rows")
check(all(np.bincount(L, minlength=C) > 0.25 * len(L)), "labels roughly uniform: %s" % np.bincount(L, minlength=C))

# Recover the C + 1 row kinds (C markers, one filler) from the rows alone: k-means, farthest-point start.
cent = [F[0]]
for _ in range(C):
    d = np.min([((F - c) ** 2).sum(1) for c in cent], axis=0)
    cent.append(F[np.argmax(d)])
cent = np.array(cent)
for _ in range(10):
    a = np.argmin(((F[:, None, :] - cent[None]) ** 2).sum(2), axis=1)
    cent = np.array([F[a == k].mean(0) for k in range(C + 1)])
a = np.argmin(((F[:, None, :] - cent[None]) ** 2).sum(2), axis=1)
filler = int(np.argmax(np.bincount(a, minlength=C + 1)))
markers = [k for k in range(C + 1) if k != filler]
sep = min(np.linalg.norm(cent[i] - cent[j]) for i in markers for j in markers if i < j)
spread = max(np.sqrt(((F[a == k] - cent[k]) ** 2).sum(1)).max() for k in range(C + 1))
check(spread < sep / 3, "row kinds well separated (largest row-to-centre %.2f, marker separation %.2f)" % (spread, sep))

# (a) every sample holds each marker exactly once; the first marker in row order is the label.
once, first = 0, []
for s, n in zip(S, N):
    seq = [k for k in a[s:s + n] if k != filler]
    once += sorted(seq) == sorted(markers)
    first.append(seq[0] if seq else -1)
check(once == len(L), "each marker exactly once in %d/%d samples" % (once, len(L)))
best = max(np.mean([dict(zip(markers, p)).get(f, -1) == l for f, l in zip(first, L)])
           for p in itertools.permutations(range(C)))
check(best >= 0.99, "first marker in row order decodes the label for %.4f of samples" % best)

# ... and a mean over the rows carries no label: class means of the per-sample mean rows coincide, and a
# nearest-class-mean classifier on them is at chance on held-out samples.
M = np.array([F[s:s + n].mean(0) for s, n in zip(S, N)])
mu = np.array([M[L == c].mean(0) for c in range(C)])
gap = max(np.linalg.norm(mu[i] - mu[j]) for i in range(C) for j in range(i + 1, C))
check(gap < 0.1 * sep, "class means of mean-pooled rows %.3f apart (markers %.2f apart)" % (gap, sep))
h = len(L) // 2
mu_tr = np.array([M[:h][L[:h] == c].mean(0) for c in range(C)])
acc = np.mean(np.argmin(((M[h:, None, :] - mu_tr[None]) ** 2).sum(2), axis=1) == L[h:])
check(acc < 0.45, "mean-pooled nearest-class-mean accuracy %.3f (chance %.3f)" % (acc, 1 / C))

# the same classifier does learn the class task, so the chance result above is not the classifier's fault
Fc, Lc, Sc, Nc = load("c0")
Mc = np.array([Fc[s:s + n].mean(0) for s, n in zip(Sc, Nc)])
hc = len(Lc) // 2
mc = np.array([Mc[:hc][Lc[:hc] == c].mean(0) for c in range(C)])
accc = np.mean(np.argmin(((Mc[hc:, None, :] - mc[None]) ** 2).sum(2), axis=1) == Lc[hc:])
check(accc > 0.7, "the same classifier on --task class: accuracy %.3f" % accc)

# (b) a pure function of (seed, id): 1 and 2 writer ranks agree, another seed differs; class is the default
check(same("o1", "o2"), "order output identical at 1 and 2 writer ranks")
check(not same("o1", "o3"), "another seed gives other data")
check(same("c0", "c1"), "--task class is the default")
sys.exit(1 if bad else 0)
EOF
# (c) an unknown task: one line, exit 2, nothing written
expect_rc 2 "$MPIDDP" synth --out bogus --task bogus
[ "$(printf '%s\n' "$ERR" | wc -l)" = 1 ] || fail "--task bogus: expected one stderr line, got: $ERR"
printf '%s' "$ERR" | qgrep -- "--task 'bogus'" || fail "--task bogus: message does not name the value: $ERR"
[ ! -e bogus ] || fail "--task bogus created its output directory"
# (d) the order task needs every marker in every sample
expect_rc 2 "$MPIDDP" synth --out few --task order --classes 5 --min-rows 3
[ "$(printf '%s\n' "$ERR" | wc -l)" = 1 ] || fail "--min-rows < --classes: expected one stderr line, got: $ERR"
printf '%s' "$ERR" | qgrep -- "--task order needs --min-rows >= --classes" || fail "--min-rows < --classes: $ERR"
[ ! -e few ] || fail "--min-rows < --classes created its output directory"
"$MPIDDP" synth --out edge --task order --classes 5 --min-rows 5 --max-rows 5 --samples 20 --shards 1 >/dev/null ||
  fail "--task order with --min-rows = --classes"
"$MPIDDP" synth --help | qgrep -- "--task class|order" || fail "synth --help does not list --task"
pass "synth --task order"
