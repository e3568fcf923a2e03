/* permute.h — counter-based randomness for the samplers: a 64-bit mixer and a keyed bijection of [0, n),
 * evaluated per position, so every rank derives the same order from (seed, epoch) with no O(N) array. */
#ifndef DDP_PERMUTE_H
#define DDP_PERMUTE_H

#include <stdint.h>

/* Bijection of [0, n) keyed by key: a Feistel network with cycle walking, O(1) memory. */
int64_t ddp_permute(int64_t x, int64_t n, uint64_t key);
/* splitmix64's finaliser. */
uint64_t ddp_mix64(uint64_t x);
/* The key of an epoch's order: a function of seed and epoch only (never of the rank or world size). */
uint64_t ddp_epoch_key(uint64_t seed, int64_t epoch);

#endif
