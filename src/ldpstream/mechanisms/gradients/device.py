"""The device's update randomizers, drawn from a stream of uniforms so that every SDK makes the same report.

docs/reference/protocol.md section 13.5 is the contract: PrivUnitG (AFT22, `ldpstream.mechanisms.gradients.privunit`)
and ProjUnit (AFNNT23, `ldpstream.mechanisms.gradients.projunit`) on one clipped vector x (||x|| <= 1), with the
cap parameters (p, q) a job spec states, and every random choice read from `Uniforms` in a fixed order: the sign of
the rounding to the sphere (u0), the cap (u1), the projection alpha by inversion (u2), then n standard normals by
Box-Muller in pairs. The laws are the server mechanisms' own (the same rounding, cap and orthogonal Gaussian part;
Box-Muller and inversion are exact transforms of uniforms), so privacy and unbiasedness are theirs:
p (1 - q) / ((1 - p) q) <= e^eps is the privacy condition (privunit's module docstring), which `cap_ratio` states.

A zero vector rounds to +-e_0 with equal odds (mean 0): the server mechanism draws a uniform direction instead;
both are unbiased for x = 0 and eps-LDP (any law of v given x is, privunit's argument holds for every v).
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.gradients.projunit import ProjUnit


class Uniforms(Protocol):
    """A device's randomness: uniforms on the 2^-53 grid in [0, 1), and uniform 64-bit words."""

    def uniforms(self, count: int) -> np.ndarray:
        """The next `count` uniforms, float64 (count,)."""

    def word64(self) -> int:
        """The next uniform 64-bit word."""


class GeneratorUniforms:
    """`Uniforms` from a numpy Generator: `random(count)` ((next64 >> 11) * 2^-53) and one raw 64-bit integer."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def uniforms(self, count: int) -> np.ndarray:
        return self.rng.random(count)

    def word64(self) -> int:
        return int(self.rng.integers(0, 2**64, dtype=np.uint64))


class ScriptedUniforms:
    """`Uniforms` that replays given values (test vectors); LDPError when they run out."""

    def __init__(self, uniforms: list[float], words: list[int] | None = None) -> None:
        self.values, self.words, self.at = list(uniforms), list(words or []), 0

    def uniforms(self, count: int) -> np.ndarray:
        if self.at + count > len(self.values):
            raise LDPError(f"scripted uniforms ran out: {count} asked, {len(self.values) - self.at} left")
        self.at += count
        return np.array(self.values[self.at - count : self.at], dtype=np.float64)

    def word64(self) -> int:
        if not self.words:
            raise LDPError("scripted words ran out")
        return self.words.pop(0)


def cap_ratio(p: float, q: float) -> float:
    """p (1 - q) / ((1 - p) q): the largest density ratio of a cap mechanism with these parameters (e^eps at most)."""
    if not (0.0 < p < 1.0 and 0.0 < q < 1.0):
        raise LDPError(f"cap parameters must lie in (0, 1), got p={p!r}, q={q!r}")
    return p * (1.0 - q) / ((1.0 - p) * q)


def cap_scale(p: float, q: float) -> tuple[float, float]:
    """(gamma, m): the cap's threshold -ndtri(q) and the unbiasing scale phi(gamma) (p/q - (1-p)/(1-q))."""
    from scipy.special import ndtri

    gamma = -float(ndtri(q))
    phi = math.exp(-gamma * gamma / 2.0) / math.sqrt(2.0 * math.pi)
    return gamma, phi * (p / q - (1.0 - p) / (1.0 - q))


def gaussians(source: Uniforms, n: int) -> np.ndarray:
    """n standard normals by Box-Muller from 2 ceil(n/2) uniforms (a, b): sqrt(-2 ln(1-a)) (cos 2 pi b, sin 2 pi b)."""
    pairs = source.uniforms(2 * ((n + 1) // 2)).reshape(-1, 2)
    rho = np.sqrt(-2.0 * np.log(1.0 - pairs[:, 0]))
    angle = 2.0 * math.pi * pairs[:, 1]
    return np.stack([rho * np.cos(angle), rho * np.sin(angle)], axis=1).reshape(-1)[:n]


def round_to_sphere(x: np.ndarray, u0: float) -> np.ndarray:
    """Step 1: a unit v with E[v] = x: +-x/||x|| with P[+] = (1 + ||x||)/2, +-e_0 for x = 0."""
    r = math.sqrt(float(np.dot(x, x)))
    if r > 1.0 + 1e-9 or not math.isfinite(r):
        raise LDPError(f"the vector must be finite and clipped to norm 1, has norm {r:.6g}")
    v = x / r if r > 0 else np.eye(1, len(x)).reshape(-1)
    return v if u0 < (1.0 + min(r, 1.0)) / 2.0 else -v


def privunit_from_unit(v: np.ndarray, p: float, q: float, source: Uniforms) -> np.ndarray:
    """Steps 2-5: the float32 PrivUnitG report U / m for the unit vector v."""
    from scipy.special import ndtri

    _, m = cap_scale(p, q)
    u1, u2 = source.uniforms(2)
    w = 1.0 - float(u2)
    alpha = -float(ndtri(w * q)) if u1 < p else float(ndtri(w * (1.0 - q)))
    z = gaussians(source, len(v))
    u = z - float(np.dot(z, v)) * v + alpha * v
    return (u / m).astype("<f4")


def privunitg_report(x: np.ndarray, p: float, q: float, source: Uniforms) -> dict[str, np.ndarray]:
    """The device's privunitg report of the clipped vector x: {"value": float32 (1, n)}."""
    v = round_to_sphere(np.asarray(x, dtype=np.float64), float(source.uniforms(1)[0]))
    return {"value": privunit_from_unit(v, p, q, source)[None, :]}


def projunit_report(x: np.ndarray, k: int, p: float, q: float, source: Uniforms) -> dict[str, np.ndarray]:
    """The device's projunit report of the clipped vector x: {"seed": uint64 (1,), "value": float32 (1, k')}, with
    the projection of `ProjUnit.projection` read off the seed (word64 >> 1)."""
    x = np.asarray(x, dtype=np.float64)
    mech = ProjUnit(dims=len(x), epsilon=1.0, k=k)  # epsilon unused here: the spec's (p, q) set the cap
    seed = source.word64() >> 1
    seeds = np.array([seed], dtype=np.uint64)
    v = round_to_sphere(x, float(source.uniforms(1)[0]))
    y = mech.project(v[None, :], seeds)[0]
    norm = math.sqrt(float(np.dot(y, y)))
    w = y / norm if norm > 0 else np.eye(1, len(y)).reshape(-1)
    return {"seed": seeds, "value": privunit_from_unit(w, p, q, source)[None, :]}


def uniforms_needed(name: str, dims: int, k: int | None = None) -> int:
    """How many uniforms one report draws (section 13.5): 3 + 2 ceil(n/2), n = dims or projunit's k'."""
    n = dims if name == "privunitg" else min(k or dims, 1 << (dims - 1).bit_length())
    return 3 + 2 * ((n + 1) // 2)
