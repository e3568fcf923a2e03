#!/usr/bin/python3
"""Test datasets written with h5py (the way Python users write them), for the mpiddp CTest suite.

  make_shards.py variants OUT   same samples as 7 uneven h5py shards (contiguous; chunked+gzip; big-endian
                                index arrays) and as 1 fixed-string shard: every reader path must agree
  make_shards.py bad OUT        one directory per docs/faults.md bad-input case + OUT/cases.txt ("case|regex")
  make_shards.py nan OUT        a valid dataset with one NaN feature value (sample 7)
  make_shards.py pack-input F   an HDF5 file with /samples/<name> (rows x D) and /labels, as `pack` takes
  make_shards.py check-pack F DIR   the packed shards hold exactly F's samples, labels and order
  make_shards.py gzip-big OUT K N   K chunked+gzip shards of N samples each (D 5, 3 classes): reads that miss
                                HDF5's chunk cache (sh/sample_threads.sh)
  make_shards.py chunked OUT SEED   240 samples (D 8, 3 classes) as 3 chunked, uncompressed shards: the same
                                shapes and file sizes for every SEED, other features and labels
  make_shards.py spiky OUT N EVERY LONG [FIRST_ID]   one-row samples with a LONG-row sample every EVERY (D 8,
                                2 classes, 2 shards): the adversarial mix for token-budget splits
"""
import os
import re
import sys

import h5py
import numpy as np

D, C = 5, 3


def base_data(n=120, seed=4):
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, 9, size=n)
    offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    feats = rng.standard_normal((int(offsets[-1]), D)).astype(np.float32)
    labels = rng.integers(0, C, size=n)
    return feats, offsets, labels


def write_shard(path, feats, offsets, labels, fmt="vlen", label_dtype=np.int32, chunked=False,
                endian="<", sample_ids=None, version=1, classes=C, skip=(), features_dtype=np.float32):
    with h5py.File(path, "w") as f:
        if "format" not in skip:
            if fmt == "vlen":
                f.attrs["format"] = "mpiddp-shard"          # h5py's default: variable-length UTF-8
            else:
                f.attrs["format"] = np.bytes_("mpiddp-shard")  # fixed-length, as C writers do
        if "version" not in skip:
            f.attrs["version"] = version
        if "num_classes" not in skip:
            f.attrs["num_classes"] = classes
        kw = dict(chunks=True, compression="gzip") if chunked else {}
        if "features" not in skip:
            f.create_dataset("features", data=np.asarray(feats, dtype=features_dtype), **kw)
        if "offsets" not in skip:
            f.create_dataset("offsets", data=np.asarray(offsets).astype(endian + "i8"), **kw)
        if "labels" not in skip:
            f.create_dataset("labels", data=np.asarray(labels).astype(label_dtype).astype(
                np.dtype(label_dtype).newbyteorder(endian)), **kw)
        if sample_ids is not None:
            f.create_dataset("sample_ids", data=np.asarray(sample_ids, dtype=np.int64))


def split(feats, offsets, labels, bounds):
    """yield (feats, offsets, labels) of samples [a, b) for consecutive bounds"""
    for a, b in zip(bounds[:-1], bounds[1:]):
        lo, hi = offsets[a], offsets[b]
        yield feats[lo:hi], offsets[a:b + 1] - lo, labels[a:b]


def variants(out):
    feats, offsets, labels = base_data()
    bounds = [0, 3, 40, 41, 70, 90, 111, 120]          # 7 uneven shards
    for name, kw in [("h5py_contig", {}), ("h5py_gzip", {"chunked": True}),
                     ("bigendian", {"endian": ">", "label_dtype": np.int64})]:
        os.makedirs(f"{out}/{name}", exist_ok=True)
        for k, (f_, o_, l_) in enumerate(split(feats, offsets, labels, bounds)):
            write_shard(f"{out}/{name}/part-{k:02d}.h5", f_, o_, l_, **kw)
    # features as a 4-byte little-endian float that is not IEEE binary32 (exponent bias 112): HDF5 converts it exactly;
    # its bytes were once memory-mapped as IEEE floats
    os.makedirs(f"{out}/oddfloat", exist_ok=True)
    for k, (f_, o_, l_) in enumerate(split(feats, offsets, labels, bounds)):
        write_shard(f"{out}/oddfloat/part-{k:02d}.h5", f_, o_, l_, skip=("features",))
        with h5py.File(f"{out}/oddfloat/part-{k:02d}.h5", "a") as f:
            t = h5py.h5t.IEEE_F32LE.copy()
            t.set_ebias(112)
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
            d = h5py.h5d.create(f.id, b"features", t, h5py.h5s.create_simple(f_.shape), dcpl)
            d.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(f_, dtype=np.float32))
    os.makedirs(f"{out}/one_shard", exist_ok=True)
    write_shard(f"{out}/one_shard/all.h5", feats, offsets, labels, fmt="fixed", label_dtype=np.int64,
                sample_ids=np.arange(len(labels)))


def bad(out):
    feats, offsets, labels = base_data(n=20)
    cases = []

    def case(name, regex, **kw):
        d = f"{out}/{name}"
        os.makedirs(d, exist_ok=True)
        args = dict(feats=feats, offsets=offsets, labels=labels)
        args.update(kw.pop("data", {}))
        write_shard(f"{d}/s0.h5", args["feats"], args["offsets"], args["labels"], **kw)
        cases.append((name, regex))

    os.makedirs(f"{out}/empty_dir", exist_ok=True)
    cases.append(("empty_dir", r"empty_dir: dataset directory: no \*\.h5 shard files"))
    cases.append(("missing_dir", r"missing_dir: dataset directory: No such file"))
    os.makedirs(f"{out}/not_hdf5", exist_ok=True)
    with open(f"{out}/not_hdf5/s0.h5", "w") as f:
        f.write("this is not HDF5\n" * 100)
    cases.append(("not_hdf5", r"not_hdf5/s0\.h5: not an HDF5 file"))
    case("truncated", r"truncated/s0\.h5: (not an HDF5 file|dataset 'features')")
    with open(f"{out}/truncated/s0.h5", "r+b") as f:
        f.truncate(os.path.getsize(f"{out}/truncated/s0.h5") // 2)
    case("no_format", r"no_format/s0\.h5: attribute 'format': missing", skip=("format",))
    case("no_version", r"no_version/s0\.h5: attribute 'version': missing", skip=("version",))
    case("no_classes", r"no_classes/s0\.h5: attribute 'num_classes': missing", skip=("num_classes",))
    case("bad_version", r"bad_version/s0\.h5: attribute 'version': 2 is not supported", version=2)
    case("one_class", r"one_class/s0\.h5: attribute 'num_classes': 1, must be in \[2, 16777216\]", classes=1)
    # a count that would size class counts and confusion matrices past memory (it wrapped a size_t once)
    case("huge_classes", r"huge_classes/s0\.h5: attribute 'num_classes': 1099511627776, must be in \[2, 16777216\]", classes=1 << 40)
    case("no_features", r"no_features/s0\.h5: dataset 'features': missing", skip=("features",))
    case("no_offsets", r"no_offsets/s0\.h5: dataset 'offsets': missing", skip=("offsets",))
    case("no_labels", r"no_labels/s0\.h5: dataset 'labels': missing", skip=("labels",))
    # numpy's default dtypes (float64, int64) and other widths: the message says what was found and how to convert
    want_f4 = r"expected 32-bit little-endian float: write it with numpy's \.astype\('<f4'\)\)$"
    case("features_f64", r"features_f64/s0\.h5: dataset 'features': wrong type \(64-bit float; " + want_f4,
         features_dtype=np.float64)
    case("features_f16", r"features_f16/s0\.h5: dataset 'features': wrong type \(16-bit float; " + want_f4,
         features_dtype=np.float16)
    case("features_be", r"features_be/s0\.h5: dataset 'features': wrong type \(32-bit big-endian float; " + want_f4,
         features_dtype=">f4")
    case("features_int", r"features_int/s0\.h5: dataset 'features': wrong type \(32-bit integer; " + want_f4,
         features_dtype=np.int32)
    case("features_rank1", r"features_rank1/s0\.h5: dataset 'features': wrong rank 1",
         data=dict(feats=feats.reshape(-1)))
    case("offsets_i32", r"offsets_i32/s0\.h5: dataset 'offsets': wrong type \(32-bit integer; expected 64-bit "
         r"integer: write it with numpy's \.astype\('<i8'\)\)$",
         data=dict(offsets=offsets.astype(np.int32)))
    # offsets stored as int32: write_shard casts to i8, so write this one by hand
    with h5py.File(f"{out}/offsets_i32/s0.h5", "a") as f:
        del f["offsets"]
        f.create_dataset("offsets", data=offsets.astype(np.int32))
    want_lab = r"expected 32- or 64-bit integer: write it with numpy's \.astype\('<i8'\)\)$"
    case("labels_float", r"labels_float/s0\.h5: dataset 'labels': wrong type \(32-bit float; " + want_lab,
         label_dtype=np.float32)
    case("labels_u8", r"labels_u8/s0\.h5: dataset 'labels': wrong type \(8-bit unsigned integer; " + want_lab,
         label_dtype=np.uint8)
    dec = offsets.copy()
    dec[7] = dec[6] - 1
    case("decreasing", r"decreasing/s0\.h5: dataset 'offsets'\[7\]: decreasing", data=dict(offsets=dec))
    emp = offsets.copy()
    emp[5] = emp[4]
    case("empty_sample", r"empty_sample/s0\.h5: dataset 'offsets'\[5\]: empty sample 4", data=dict(offsets=emp))
    first = offsets.copy()
    first[0] = 1
    case("offset0", r"offset0/s0\.h5: dataset 'offsets'\[0\]: 1, must be 0", data=dict(offsets=first))
    oor = offsets.copy()
    oor[20] = oor[20] + 5
    case("offset_range", r"offset_range/s0\.h5: dataset 'offsets'\[20\]: [0-9]+ out of range", data=dict(offsets=oor))
    short = offsets.copy()
    short[20] = short[20] - 1
    case("offset_end", r"offset_end/s0\.h5: dataset 'offsets'\[20\]: [0-9]+, must equal the [0-9]+ rows", data=dict(offsets=short))
    lab = labels.copy()
    lab[11] = C
    case("label_range", r"label_range/s0\.h5: dataset 'labels'\[11\]: 3 out of range \[0, 3\)", data=dict(labels=lab))
    neg = labels.copy()
    neg[2] = -1
    case("label_negative", r"label_negative/s0\.h5: dataset 'labels'\[2\]: -1 out of range", data=dict(labels=neg))
    case("labels_length", r"labels_length/s0\.h5: dataset 'labels': length 19 differs", data=dict(labels=labels[:19]))
    # offsets written as np.cumsum(rows), without the leading 0: offsets is the array to blame, not labels
    case("offsets_no_zero", r"offsets_no_zero/s0\.h5: dataset 'offsets': 20 values for 20 labels: offsets needs N\+1 "
         r"values, 0 first \(write np\.concatenate\(\[\[0\], np\.cumsum\(rows\)\]\)\)$",
         data=dict(offsets=offsets[1:]))
    # the same with one sample: offsets [R] beside one label (it was called a shard of no samples)
    case("offsets_no_zero_one", r"offsets_no_zero_one/s0\.h5: dataset 'offsets': 1 values for 1 labels: offsets needs "
         r"N\+1 values, 0 first \(write np\.concatenate\(\[\[0\], np\.cumsum\(rows\)\]\)\)$",
         data=dict(feats=feats[:offsets[1]], offsets=offsets[1:2], labels=labels[:1]))
    # data stored outside the shard: a virtual dataset (its source file missing, every feature read as the fill
    # value 0) and external raw storage (truncated) both validated as valid; any dataset may be either
    for name, obj in [("virtual_features", "features"), ("virtual_labels", "labels")]:
        case(name, rf"{name}/s0\.h5: dataset '{obj}': virtual dataset \(its data lives in other files\): not supported")
        with h5py.File(f"{out}/{name}/s0.h5", "a") as f:
            x = f[obj][()]
            del f[obj]
            lay = h5py.VirtualLayout(shape=x.shape, dtype=x.dtype)
            lay[...] = h5py.VirtualSource(f"{out}/{name}/missing_source.h5", "x", shape=x.shape)
            f.create_virtual_dataset(obj, lay, fillvalue=0)
    for name, obj in [("external_features", "features"), ("external_offsets", "offsets")]:
        case(name, rf"{name}/s0\.h5: dataset '{obj}': external storage \(its data lives in other files\): not supported")
        with h5py.File(f"{out}/{name}/s0.h5", "a") as f:
            x = f[obj][()]
            del f[obj]
            x.tofile(f"{out}/{name}/{obj}.raw")
            f.create_dataset(obj, shape=x.shape, dtype=x.dtype, external=[(f"{out}/{name}/{obj}.raw", 0, x.nbytes)])
        if obj == "features":  # truncated; the offsets' file is intact: refused all the same
            os.truncate(f"{out}/{name}/{obj}.raw", 100)
    # an external link to a dataset of another file (or a soft link through one): HDF5 follows it, and the offset it
    # gives is one in that file, yet the shard file was mapped there (silently wrong features, or false NaNs)
    for name, obj in [("extlink_features", "features"), ("softlink_offsets", "offsets")]:
        how = "an external link" if name.startswith("ext") else "a link into another file"
        case(name, rf"{name}/s0\.h5: dataset '{obj}': {how} \(its data lives in other files\): not supported")
        with h5py.File(f"{out}/{name}/s0.h5", "a") as f:
            x = f[obj][()]
            del f[obj]
            with h5py.File(f"{out}/{name}/side.data", "w") as g:
                g.create_dataset("pad", data=np.zeros(4096, np.float32))
                g.create_dataset(obj, data=x)
            if name.startswith("ext"):
                f[obj] = h5py.ExternalLink("side.data", "/" + obj)
            else:
                f["elsewhere"] = h5py.ExternalLink("side.data", "/" + obj)
                f[obj] = h5py.SoftLink("/elsewhere")
    # storage never (fully) written, e.g. a writer that died after creating the dataset: read as the fill value (0)
    for name, how in [("unwritten_chunks", r"H5Dget_num_chunks: 1 of 7 chunks"),
                      ("unwritten_contiguous", r"H5Dget_space_status: not allocated")]:
        case(name, rf"{name}/s0\.h5: dataset 'features': storage not \(fully\) written \({how}\): the writer did not finish")
        with h5py.File(f"{out}/{name}/s0.h5", "a") as f:
            del f["features"]
            if name == "unwritten_chunks":
                f.create_dataset("features", shape=feats.shape, dtype=np.float32, chunks=(16, D))[:10] = feats[:10]
            else:
                f.create_dataset("features", shape=feats.shape, dtype=np.float32)
    # an 8 KB shard declaring 2^62 + 19 rows (chunked, unwritten), the last sample owning nearly all: refused by the
    # manifest's limit before any storage is read, where it once failed late (BLAS int range, a run directory left)
    huge = (1 << 62) + 19
    case("huge_rows", rf"huge_rows/s0\.h5: dataset 'features': {huge} rows x {D} columns: more than the 2\^50 values")
    with h5py.File(f"{out}/huge_rows/s0.h5", "a") as f:
        del f["features"], f["offsets"]
        f.create_dataset("offsets", data=np.append(offsets[:-1], huge).astype(np.int64))
        f.create_dataset("features", shape=(huge, D), dtype=np.float32, chunks=(1024, D))
    # shards that disagree with each other
    case("dim_differs", r"dim_differs/s1\.h5: dataset 'features': D=6 differs from D=5")
    write_shard(f"{out}/dim_differs/s1.h5", np.zeros((int(offsets[-1]), D + 1), np.float32), offsets, labels)
    case("classes_differ", r"classes_differ/s1\.h5: attribute 'num_classes': 4 differs from 3")
    write_shard(f"{out}/classes_differ/s1.h5", feats, offsets, labels, classes=C + 1)
    with open(f"{out}/cases.txt", "w") as f:
        for name, regex in cases:
            f.write(f"{name}|{regex}\n")


def nan_data(out):
    feats, offsets, labels = base_data()
    feats[offsets[7] + 1, 2] = np.nan   # one value of sample 7
    os.makedirs(out, exist_ok=True)
    write_shard(f"{out}/s0.h5", feats, offsets, labels)


def pack_input(path, n=57, seed=11):
    rng = np.random.default_rng(seed)
    names = [f"item_{rng.integers(0, 10**6):07d}_{i}" for i in range(n)]
    with h5py.File(path, "w") as f:
        g = f.create_group("samples")
        for nm in names:
            g.create_dataset(nm, data=rng.standard_normal((int(rng.integers(1, 12)), D)).astype(np.float32))
        f.create_dataset("labels", data=rng.integers(0, C, size=n).astype(np.int32))


def spiky(out, n, every, long_rows, first_id=0):
    rng = np.random.default_rng(n + every)
    rows = np.array([long_rows if i % every == every // 2 else 1 for i in range(n)])
    offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    feats = rng.standard_normal((int(offsets[-1]), 8)).astype(np.float32)
    labels = rng.integers(0, 2, size=n)
    os.makedirs(out, exist_ok=True)
    for k, (f, o, lab) in enumerate(split(feats, offsets, labels, [0, n // 2, n])):
        first = first_id + (0 if k == 0 else n // 2)
        write_shard(os.path.join(out, f"shard-{k:05d}.h5"), f, o, lab, classes=2,
                    sample_ids=np.arange(first, first + len(lab)))


def gzip_big(out, k, n):
    feats, offsets, labels = base_data(n=k * n)
    os.makedirs(out, exist_ok=True)
    for i, (f_, o_, l_) in enumerate(split(feats, offsets, labels, list(range(0, k * n + 1, n)))):
        write_shard(f"{out}/part-{i:04d}.h5", f_, o_, l_, chunked=True)


def chunked(out, seed):
    rows = np.random.default_rng(4).integers(1, 9, size=240)
    offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    rng = np.random.default_rng(seed)
    feats = rng.standard_normal((int(offsets[-1]), 8)).astype(np.float32)
    labels = rng.integers(0, 3, size=240).astype(np.int64)
    os.makedirs(out, exist_ok=True)
    for k, (f_, o_, l_) in enumerate(split(feats, offsets, labels, [0, 80, 160, 240])):
        with h5py.File(f"{out}/part-{k}.h5", "w") as f:
            f.attrs["format"] = np.bytes_("mpiddp-shard")
            f.attrs["version"] = 1
            f.attrs["num_classes"] = 3
            for name, data in (("features", f_), ("offsets", o_), ("labels", l_)):
                f.create_dataset(name, data=data, chunks=True)


def check_pack(path, out):
    with h5py.File(path, "r") as f:
        names = sorted(f["samples"].keys(), key=lambda s: s.encode())
        want = [(f["samples"][nm][()], int(f["labels"][i])) for i, nm in enumerate(names)]
    got = []
    shards = sorted(p for p in os.listdir(out) if p.endswith(".h5"))
    for p in shards:
        with h5py.File(f"{out}/{p}", "r") as f:
            assert f.attrs["format"] in (b"mpiddp-shard", "mpiddp-shard"), f.attrs["format"]
            feats, off, lab = f["features"][()], f["offsets"][()], f["labels"][()]
            ids = f["sample_ids"][()]
            assert f["features"].id.get_offset() % 4096 == 0, "features not 4096-aligned"
            assert f["features"].chunks is None, "features not contiguous"
            for i in range(len(lab)):
                got.append((feats[off[i]:off[i + 1]], int(lab[i]), int(ids[i])))
    assert len(got) == len(want), (len(got), len(want))
    for k, ((wf, wl), (gf, gl, gid)) in enumerate(zip(want, got)):
        assert gid == k, (k, gid)
        assert wl == gl, (k, wl, gl)
        assert np.array_equal(wf, gf), k
    print(f"pack round trip: {len(got)} samples in {len(shards)} shards match the input")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "variants":
        variants(sys.argv[2])
    elif cmd == "bad":
        bad(sys.argv[2])
    elif cmd == "nan":
        nan_data(sys.argv[2])
    elif cmd == "pack-input":
        pack_input(sys.argv[2])
    elif cmd == "spiky":
        spiky(sys.argv[2], *(int(a) for a in sys.argv[3:]))
    elif cmd == "gzip-big":
        gzip_big(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "chunked":
        chunked(sys.argv[2], int(sys.argv[3]))
    elif cmd == "check-pack":
        check_pack(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
