"""Memoization without a table: a device's permanent responses are a pure function of its secret and a memo key.

A device holds one 64-bit secret, drawn once (`draw_secrets`) and kept on the device; the server never sees it.
Every memoized random choice of the device (RAPPOR's permanent response to a value, 1BitMean's alpha and its bit
for a rounded value, dBitFlip's sampled buckets) is read from `keyed_words(secrets, tag, *keys)`: a word derived
from (secret, tag, keys) by nested splitmix64 streams, h_0 = mix(secret xor tag), h_i = mix(h_{i-1} + (key_i + 1)
gamma), so the first level is splitmix64's stream seeded by the secret (Steele, Lea and Flood, OOPSLA 2014).
Asking again with the same secret and key gives the same answer, so the memo needs no state besides the secret,
the caller persists nothing else, and one call is vectorised over millions of devices.

One secret per device AND collection: two collections (or attributes) of a device that shared a secret would read
the same streams, so their permanent responses would be correlated. A device with one master secret derives the
secret of each collection as `keyed_words(master, TAG_COLLECTION, collection_key)`, and a collector of several
attributes gives each attribute its own, `attribute_secrets(secrets, name)` (keyed by the attribute's name, so that
reordering a spec's attributes changes no memo).

What this is not: a cryptographic PRF. The outputs for distinct keys are statistically independent uniforms (the
tests check the permanent responses' distributions and their independence across keys by chi-square), which is
what the privacy arguments use, provided the secret stays on the device. A deployment whose threat model includes
an adversary who can test many guesses of the secret against reports should swap `keyed_words` for a keyed PRF
(e.g. SipHash-2-4 or BLAKE2b keyed by the secret); the mechanisms only call this module.
"""

from __future__ import annotations

import hashlib
from typing import TypeAlias

import numpy as np

from ldpstream.mechanisms.hashing import mix64_inplace

GAMMA = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's increment, 2^64 / golden ratio
_UNIT = 2.0**-53
Words: TypeAlias = np.ndarray | np.integer | int  # 64-bit words (secrets or keys): an array of them, or one

# One tag per kind of memoized choice, so that two mechanisms (or two uses in one) never share a stream.
TAG_PERMANENT = 0x51  # a permanent randomized response to a value (GRR: the code; unary / Bloom: bits)
TAG_PERMANENT_TIE = 0x53  # the rare bytes that need more than 8 bits to decide a Bernoulli (`keyed_bits`)
TAG_COHORT = 0x54  # a device's RAPPOR cohort
TAG_BLOOM = 0x5B  # the public hash functions of RAPPOR's cohorts (keyed by the cohort, not by a device secret)
TAG_ALPHA = 0x55  # 1BitMean's alpha-point rounding offset
TAG_SAMPLE = 0x56  # dBitFlip's sampled buckets
TAG_COLLECTION = 0x57  # a collection's secret derived from a device's master secret
TAG_ATTRIBUTE = 0x58  # an attribute's secret derived from its collection's (`attribute_secrets`)
TAG_ATTRIBUTE_SAMPLE = 0x59  # which k of a collection's d attributes a device reports, fixed by its secret
TAG_SIMULATED = 0x5A  # a simulated device's secret derived from the simulation's seed and the device's index


def draw_secrets(rng: np.random.Generator, n: int) -> np.ndarray:
    """n fresh uniform 64-bit device secrets (uint64)."""
    return rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)


def name_key(name: str) -> int:
    """A stable 64-bit key of a name (the first 8 bytes of its BLAKE2b digest, little-endian)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


def attribute_secrets(secrets: np.ndarray, name: str) -> np.ndarray:
    """The secrets of attribute `name`, derived from the devices' collection secrets (uint64, same shape)."""
    return keyed_words(secrets, TAG_ATTRIBUTE, np.uint64(name_key(name)))


def keyed_words(secrets: Words, tag: int, *keys: Words) -> np.ndarray:
    """Uniform 64-bit words, one per broadcast (secret, key...) combination, deterministic in its inputs."""
    h = mix64_inplace(np.asarray(secrets, dtype=np.uint64) ^ np.uint64(tag))  # a new array: mixed in place
    with np.errstate(over="ignore"):  # arithmetic modulo 2^64 is the point (numpy warns for 0-d keys)
        for key in keys:
            h = mix64_inplace(h + (np.asarray(key).astype(np.uint64) + np.uint64(1)) * GAMMA)
    return h


def keyed_uniform(secrets: Words, tag: int, *keys: Words) -> np.ndarray:
    """Uniforms in [0, 1) on the 2^-53 grid, from `keyed_words`."""
    return (keyed_words(secrets, tag, *keys) >> np.uint64(11)).astype(np.float64) * _UNIT


def keyed_bits(
    secrets: np.ndarray, keys: np.ndarray, width: int, prob: float, uniforms: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """((n, width) bool, (n, uniforms) float): independent Bernoulli(prob) bits memoized per (secret, key), 8 bits
    per hashed word, and `uniforms` keyed uniforms in [0, 1) from the same (secret, key) stream after those words.

    As `ldpstream.mechanisms.frequency.unary.bernoulli_bits`: byte B decides the bit 1{B < floor(256 prob)} unless B
    equals that threshold (1 in 256), in which case a uniform keyed by (secret, key, position) decides 1{V < 256 prob -
    top}. secrets and keys are (n,) vectors; the bytes of word i of a row are bit positions 8i..8i+7, and the uniforms
    are words ceil(width / 8) onwards (one stream: the two mixes of (secret, key) are done once per device).
    """
    n, word_count = keys.shape[0], -(-width // 8)
    top = np.floor(prob * 256)
    rest = prob * 256 - top  # exact: scaling by 256 and subtracting an integer lose nothing
    words = keyed_words(secrets[:, None], TAG_PERMANENT, keys[:, None], np.arange(word_count + uniforms))
    tail = (words[:, word_count:] >> np.uint64(11)).astype(np.float64) * _UNIT
    byte = np.ascontiguousarray(words[:, :word_count]).astype("<u8", copy=False).view(np.uint8).reshape(n, -1)
    bits = byte[:, :width] < top
    ties = np.flatnonzero(byte[:, :width] == top)  # flat: np.nonzero on 2-d costs 10x more
    rows, cols = np.divmod(ties, width)
    bits.flat[ties] = keyed_uniform(secrets[rows], TAG_PERMANENT_TIE, keys[rows], cols) < rest
    return bits, tail
