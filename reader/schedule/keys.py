"""The keys of the schedule's randomness, in one place: the domain tags that keep its random streams
apart, the (seed, epoch) words they start from, and the counter-based hash and keyed Feistel permutation
the emission draws from (any round's order, any frame of a piece's permutation, computed directly).
Changing any of them changes every order, so resume states name the version they are for.
"""

from __future__ import annotations

import numpy as np

from cache.arguments import check_int

# Domain tags keep the (seed, epoch) stream of the episode order apart from the consumers' streams, a
# mixture's and an elastic rest's.
TAG_ORDER = 0x6F72
TAG_CONSUMER = 0x636E
TAG_MIXTURE = 0x6D78
TAG_REST = 0x7273
MAX_SEED = 2**64
MAX_EPOCH = 2**32
FEISTEL_ROUNDS = 4
U64 = np.uint64
GOLDEN = U64(0x9E3779B97F4A7C15)
ODD = U64(0xD6E8FEB86659FD93)


def seed_words(seed: int, epoch: int) -> list[int]:
    """Fixed-width 32-bit words of (seed, epoch), so distinct inputs never alias in a SeedSequence."""
    seed = check_int("seed", seed, 0, MAX_SEED)
    epoch = check_int("epoch", epoch, 0, MAX_EPOCH)
    return [seed & 0xFFFFFFFF, seed >> 32, epoch]


# ---------------------------------------------------------------------------------------------------------
# Counter-based randomness: any round's order and any frame of a piece's permutation is computed directly
# from (key, counters), so a resume never replays earlier rounds and whole blocks vectorize.


def mix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer: a bijective 64-bit mixer (uint64 arrays wrap, as intended)."""
    x = x ^ (x >> U64(30))
    x = x * U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> U64(27))
    x = x * U64(0x94D049BB133111EB)
    return x ^ (x >> U64(31))


def hash64(key: np.uint64, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A 64-bit pseudo-random value per (key, a, b), for 1-D int arrays a and b."""
    return mix64(mix64(key ^ (a.astype(U64) * GOLDEN)) + b.astype(U64) * ODD)


def feistel(keys: np.ndarray, piece: np.ndarray, x: np.ndarray, half: np.ndarray) -> np.ndarray:
    """A keyed bijection of [0, 4**half) per piece (balanced Feistel network of `half`-bit halves)."""
    mask = (U64(1) << half) - U64(1)
    left, right = x >> half, x & mask
    for key in keys:
        left, right = right, left ^ (hash64(key, piece, right) & mask)
    return (left << half) | right


def permute_within(keys: np.ndarray, piece: np.ndarray, t: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Element `t` of a pseudo-random permutation of `range(length)`, one permutation per piece.

    Cycle-walking: the Feistel bijection is over the smallest power of four >= length (< 4 * length), and
    out-of-range outputs are fed back in until they land in range; that restricts a bijection of the
    larger domain to a bijection of [0, length), on average in fewer than four passes.
    """
    piece = piece.astype(U64)
    length = length.astype(U64)
    half = ((np.frexp((length - U64(1)).astype(np.float64))[1] + 1) // 2).astype(U64)
    y = feistel(keys, piece, t.astype(U64), half)
    todo = np.flatnonzero(y >= length)
    while todo.size:
        y[todo] = feistel(keys, piece[todo], y[todo], half[todo])
        todo = todo[y[todo] >= length[todo]]
    return y.astype(np.int64)
