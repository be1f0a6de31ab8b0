"""A synthetic population of strings with a known ranking: Zipf frequencies over random distinct words.

`zipf_words` draws `distinct` distinct words over an alphabet (lengths uniform in [min_length, max_length]), ranks
them at random, and gives each of n devices one word, word i with probability proportional to (i + 1)^-exponent.
The words, their exact device counts and the devices' words come back, so a heavy-hitter decoder's precision and
recall of the true top k can be computed exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ldpstream.simulator.population import random_words, zipf_probabilities


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
    words = random_words(distinct, rng, alphabet, min_length, max_length)
    device_words = rng.choice(distinct, size=n, p=zipf_probabilities(distinct, exponent))
    return StringPopulation(words=words, counts=np.bincount(device_words, minlength=distinct),
                            device_words=device_words)
