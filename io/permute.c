/* permute.c — the samplers' counter-based randomness; see permute.h. */
#include "io/permute.h"

uint64_t ddp_mix64(uint64_t x)
{ /* splitmix64 finaliser */
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

int64_t ddp_permute(int64_t x, int64_t n, uint64_t key)
{
    if (n <= 1) return 0;
    int bits = 0;
    while (((int64_t)1 << bits) < n) bits++;
    int half = (bits + 1) / 2;
    uint64_t mask = ((uint64_t)1 << half) - 1;
    uint64_t y = (uint64_t)x;
    do { /* cycle walking: re-encrypt until inside [0, n); domain < 4n so this ends fast */
        uint64_t l = y >> half, r = y & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t f = ddp_mix64(key ^ ((uint64_t)round << 56) ^ r) & mask;
            uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        y = (l << half) | r;
    } while (y >= (uint64_t)n);
    return (int64_t)y;
}

uint64_t ddp_epoch_key(uint64_t seed, int64_t epoch)
{
    return ddp_mix64(ddp_mix64(seed) ^ (uint64_t)epoch * 0x632be59bd9b4e019ULL);
}
