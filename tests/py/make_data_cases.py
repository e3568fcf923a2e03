#!/usr/bin/python3
"""Small h5py-written inputs for the pack, read-error and histogram checks (tests/sh/pack_inputs.sh, shard_reads.sh).

  make_data_cases.py pack OUT     pack inputs OUT/<case>.h5 and OUT/cases.txt, one "case|rc|regex" a line: rc 1 and
                                  the error line's regex (values HDF5 would make up: storage never written, virtual,
                                  external), or rc 0 and the notice's regex (NaN/Inf, counted here as float32), or rc
                                  0 and an empty regex (no notice)
  make_data_cases.py corrupt OUT  OUT/train and OUT/val, each of shard-00000.h5 and shard-00001.h5; train's
                                  shard-00001.h5 has chunked features with a Fletcher-32 checksum and one corrupt chunk
                                  inside one sample; OUT/expect.txt: "rows A B", "sample I", "total R" of that shard
  make_data_cases.py long OUT     one shard whose samples reach past 65535 rows (D 1); OUT/hist.txt: the inspect
                                  histogram lines expected, "LABEL COUNT" (bins of floor(log2(rows)), the last 32768+)
"""
import os
import re
import sys

import h5py
import numpy as np

D = 3


def shard(path, feats, offsets, labels, classes=3, features_kw=None):
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "mpiddp-shard"
        f.attrs["version"] = 1
        f.attrs["num_classes"] = classes
        f.create_dataset("features", data=np.asarray(feats, np.float32), **(features_kw or {}))
        f.create_dataset("offsets", data=np.asarray(offsets, np.int64))
        f.create_dataset("labels", data=np.asarray(labels, np.int64))


def pack_cases(out):
    os.makedirs(out, exist_ok=True)
    cases = []

    def base(f, n=10, dtype=np.float32):
        rng = np.random.default_rng(n)
        g = f.create_group("samples")
        for i in range(n):
            g.create_dataset(f"x{i:03d}", data=rng.standard_normal((int(rng.integers(1, 6)), D)).astype(dtype))
        f.create_dataset("labels", data=np.arange(n) % 3)
        return g

    def refused(name, obj, index, why, build):
        with h5py.File(f"{out}/{name}.h5", "w") as f:
            build(f)
        where = f"'{obj}'" + (f"\\[{index}\\]" if index is not None else "")
        cases.append((name, 1, f"^mpiddp pack: error: {name}\\.h5: dataset {where}: {why}$"))

    def replace(f, name, **kw):
        g = base(f)
        del g[name]
        return g.create_dataset(name, **kw)

    unw = r"storage not \(fully\) written \(%s\): it would read as its fill value; write its values"
    # a chunked sample of which no chunk, or one of 4, was written: HDF5 reads the rest as the fill value
    refused("unwritten_chunks", "/samples/x002", 2, unw % "H5Dget_num_chunks: 0 of 4 chunks",
            lambda f: replace(f, "x002", shape=(4, D), dtype=np.float32, chunks=(1, D)))
    refused("part_written", "/samples/x006", 6, unw % "H5Dget_num_chunks: 1 of 4 chunks",
            lambda f: replace(f, "x006", shape=(4, D), dtype=np.float32, chunks=(1, D)).__setitem__(0, 1.0))
    # contiguous storage never allocated (h5py allocates it late, at the first write)
    refused("unwritten_contiguous", "/samples/x004", 4, unw % "H5Dget_space_status: not allocated",
            lambda f: replace(f, "x004", shape=(4, D), dtype=np.float32))
    # a sample declaring 2^31 rows with nothing written: once an 8 GiB allocation and an out-of-memory line naming
    # neither the input nor the sample
    refused("huge_declared", "/samples/x009", 9, unw % f"H5Dget_num_chunks: 0 of {2**31 // 2**16} chunks",
            lambda f: replace(f, "x009", shape=(2**31, D), dtype=np.float32, chunks=(2**16, D)))

    def virtual(f):
        g = base(f)
        del g["x001"]
        lay = h5py.VirtualLayout(shape=(2, D), dtype=np.float32)
        lay[...] = h5py.VirtualSource(f"{os.path.abspath(out)}/no-such-source.h5", "x", shape=(2, D))
        g.create_virtual_dataset("x001", lay, fillvalue=0)
    refused("virtual_missing", "/samples/x001", 1,
            r"virtual dataset \(its data lives in other files, read as the fill value where they are missing\): "
            r"not supported, store the values in the input file", virtual)

    def external(f):
        with open(f"{out}/short.raw", "wb") as raw:  # 1 of the 4 rows the sample declares
            raw.write(np.ones(D, np.float32).tobytes())
        replace(f, "x003", shape=(4, D), dtype=np.float32, external=[(f"{os.path.abspath(out)}/short.raw", 0, 4 * D * 4)])
    refused("external_short", "/samples/x003", 3,
            r"external storage \(its data lives in other files, read as zeros past their end\): not supported, store "
            r"the values in the input file", external)

    def labels_unwritten(f):
        base(f)
        del f["labels"]
        f.create_dataset("labels", shape=(10,), dtype=np.int64)
    refused("labels_unwritten", "/labels", None, unw % "H5Dget_space_status: not allocated", labels_unwritten)

    # NaN/Inf in what pack writes: exit 0 with a notice counting them as float32 holds them
    def nonfinite(name, samples):
        with h5py.File(f"{out}/{name}.h5", "w") as f:
            g = base(f)
            for sample, values in samples.items():
                del g[sample]
                g[sample] = values
            names = sorted(g.keys(), key=lambda s: s.encode())
            as32 = [np.asarray(g[nm][()]).astype(np.float32) for nm in names]
        bad = [int(np.count_nonzero(~np.isfinite(x))) for x in as32]
        first = next(i for i, b in enumerate(bad) if b)
        cases.append((name, 0, f"^mpiddp pack: notice: {sum(bad)} non-finite feature value\\(s\\) \\(NaN or Inf as "
                      f"float32: a float64 beyond its range becomes Inf\\) in {sum(1 for b in bad if b)} sample\\(s\\) "
                      f"of {name}\\.h5, the first dataset '/samples/{re.escape(names[first])}'\\[{first}\\]; "
                      f"`mpiddp inspect OUT` names the first in the shards$"))
    with np.errstate(over="ignore"):
        nonfinite("nan", {"x004": np.array([[np.nan, 1, 2], [3, np.inf, 5]], np.float32)})
        nonfinite("f64_overflow", {"x007": np.array([[1e300, -1e300, 1e-300]], np.float64)})
        # in both halves of the input: at np 2 each rank writes some, and the notice sums the ranks' counts
        nonfinite("nan_both", {"x001": np.array([[np.nan, 1, 2]], np.float32),
                               "x008": np.array([[np.inf, -np.inf, 0], [1, 2, np.nan]], np.float32)})
    with h5py.File(f"{out}/valid.h5", "w") as f:
        base(f)
    cases.append(("valid", 0, ""))

    # layouts other than h5py's default that hold every value: packed as they are, no notice
    def relayout(name, **kw):
        with h5py.File(f"{out}/{name}.h5", "w") as f:
            g = base(f)
            for nm in list(g.keys()):
                x = g[nm][()]
                del g[nm]
                if kw.get("maxshape"):  # created empty, then grown to its rows
                    d = g.create_dataset(nm, shape=(0, D), **kw)
                    d.resize(x.shape[0], axis=0)
                    d[...] = x
                else:
                    g.create_dataset(nm, data=x, **kw)
        cases.append((name, 0, ""))
    relayout("chunked_gzip", chunks=(1, D), compression="gzip", shuffle=True)
    relayout("fillvalue_contiguous", fillvalue=7.0)
    relayout("fillvalue_chunked", chunks=(1, D), fillvalue=-1.0)
    relayout("grown", chunks=(2, D), maxshape=(None, D))
    # a written (early-allocated, so HDF5 cannot tell) sample of 2^31 rows: 24 GiB in a sparse file, which pack's
    # write buffer cannot hold under the test's address-space limit (not in cases.txt: run apart)
    with h5py.File(f"{out}/huge_early.h5", "w") as f:
        g = base(f)
        del g["x005"]
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.CONTIGUOUS)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        h5py.h5d.create(g.id, b"x005", h5py.h5t.IEEE_F32LE, h5py.h5s.create_simple((2**31, D)), dcpl=dcpl)
    with open(f"{out}/cases.txt", "w") as f:
        for name, rc, regex in cases:
            f.write(f"{name}|{rc}|{regex}\n")


def corrupt(out):
    rng = np.random.default_rng(5)
    rows = np.array([3, 5, 8, 16, 8, 4, 2, 6])   # sample 3: rows 16..31, chunks 2 and 3 of 8 rows; no other sample
    offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    victim, chunk = 3, 3
    assert offsets[victim] <= chunk * 8 and (chunk + 1) * 8 <= offsets[victim + 1]
    for split in ("train", "val"):
        os.makedirs(f"{out}/{split}", exist_ok=True)
        for k in range(2):
            feats = rng.standard_normal((int(offsets[-1]), D))
            labels = rng.integers(0, 3, size=len(rows))
            chunked = split == "train" and k == 1
            path = f"{out}/{split}/shard-{k:05d}.h5"
            shard(path, feats, offsets, labels,
                  features_kw=dict(chunks=(8, D), fletcher32=True) if chunked else None)
            if chunked:
                with h5py.File(path, "r") as f:
                    off = f["features"].id.get_chunk_info(chunk).byte_offset
                with open(path, "r+b") as fh:   # one byte of the chunk's data: its checksum no longer matches
                    fh.seek(off + 5)
                    b = fh.read(1)
                    fh.seek(off + 5)
                    fh.write(bytes([b[0] ^ 0xFF]))
    with open(f"{out}/expect.txt", "w") as f:
        f.write(f"rows {offsets[victim]} {offsets[victim + 1] - 1}\nsample {victim}\ntotal {offsets[-1]}\n")


def long_samples(out):
    rows = np.array([1, 3, 40000, 70000])
    offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    os.makedirs(out, exist_ok=True)
    shard(f"{out}/shard-00000.h5", np.ones((int(offsets[-1]), 1)), offsets, [0, 1, 0, 1], classes=2)
    bins = {}
    for r in rows:
        b = min(int(r).bit_length() - 1, 15)
        bins[b] = bins.get(b, 0) + 1
    with open(f"{out}/hist.txt", "w") as f:
        for b in sorted(bins):
            label = f"{1 << b}+" if b == 15 else f"{1 << b}-{(2 << b) - 1}"
            f.write(f"{label} {bins[b]}\n")


if __name__ == "__main__":
    modes = {"pack": pack_cases, "corrupt": corrupt, "long": long_samples}
    if len(sys.argv) != 3 or sys.argv[1] not in modes:
        sys.exit(__doc__)
    modes[sys.argv[1]](sys.argv[2])
