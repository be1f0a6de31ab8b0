"""A synthetic population of strings with a known ranking: Zipf frequencies over random distinct words.

`zipf_words` draws `distinct` distinct words over an alphabet (lengths uniform in [min_length, max_length]), ranks
them at random, and gives each of n devices one word, word i with probability proportional to (i + 1)^-exponent.
The words, their exact device counts and the devices' words come back, so a heavy-hitter decoder's precision and
recall of the true top k can be computed exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from producer.population import zipf_probabilities


@dataclass(frozen=True)
class StringPopulation:
    """The distinct words (rank order), each word's device count, and each device's word index."""

    words: np.ndarray  # (distinct,) bytes, S<max_length>
    counts: np.ndarray  # (distinct,) int64
    device_words: np.ndarray  # (n,) int64 index into words

    def items(self) -> np.ndarray:
        """The devices' words, (n,) bytes."""
        return self.words[self.device_words]

    def top(self, k: int) -> list[str]:
        """The k words with the most devices (ties broken by rank)."""
        order = np.argsort(-self.counts, kind="stable")[:k]
        return [w.decode() for w in self.words[order]]


def zipf_words(distinct: int, exponent: float, n: int, rng: np.random.Generator,
               alphabet: str = "abcdefghijklmnopqrstuvwxyz", min_length: int = 3,
               max_length: int = 8) -> StringPopulation:
    """`distinct` random words over `alphabet`, Zipf(exponent) over their ranks, one word per device (vectorised)."""
    symbols = np.frombuffer(alphabet.encode("ascii"), dtype=np.uint8)
    words = np.zeros(0, dtype=f"S{max_length}")
    while words.shape[0] < distinct:  # draw extra, drop repeats; a few rounds at most
        want = 2 * (distinct - words.shape[0]) + 16
        lengths = rng.integers(min_length, max_length + 1, size=want)
        rows = symbols[rng.integers(0, symbols.shape[0], size=(want, max_length))]
        rows[np.arange(max_length)[None, :] >= lengths[:, None]] = 0
        fresh = np.ascontiguousarray(rows).view(f"S{max_length}").ravel()
        words = np.concatenate([words, fresh])
        _, first = np.unique(words, return_index=True)
        words = words[np.sort(first)]
    words = words[:distinct]
    device_words = rng.choice(distinct, size=n, p=zipf_probabilities(distinct, exponent))
    return StringPopulation(words=words, counts=np.bincount(device_words, minlength=distinct),
                            device_words=device_words)
