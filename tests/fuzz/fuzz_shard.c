/* fuzz_shard.c — libFuzzer target over shard opening and validation: the input bytes are written to a
 * file and validated as a shard (the path rank 0 takes for every file of a dataset). Any crash, hang or
 * sanitizer report is a bug; inputs that found one go to tests/fuzz/regressions/ and are replayed by CTest.
 *   clang -fsanitize=fuzzer,address,undefined ... (see tests/fuzz/run.sh) */
#include "io/shard.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("MPIDDP_VALIDATE_TIMEOUT", "2", 0); /* a hang inside HDF5 becomes an error quickly */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/mpiddp-fuzz-%ld.h5", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    ddp_shard_meta m;
    ddp_shard_stats st = {0};
    int64_t counts[16] = {0};
    st.class_counts = counts;
    st.classes_cap = 16;
    ddp_shard_validate(path, "fuzz.h5", &m, &st);
    if (ddp_hdf5_poisoned()) _exit(0); /* HDF5 hung or crashed (guarded): this fuzzing job ends, -fork starts another */
    return 0;
}
