/**
 * Randomness for perturbation, from `crypto.getRandomValues` only (WebCrypto, in browsers and Node alike), drawn in
 * blocks. Every draw is exact: uniforms on the 2^-53 grid (as numpy's `Generator.random`), integers by rejection
 * (no modulo bias), so a report is distributed exactly as the Python SDK's.
 */

const BLOCK_WORDS = 1024;

export interface Random {
  /** A uniform on [0, 1), on the 2^-53 grid. */
  uniform(): number;
  /** A uniform integer in [0, n), n <= 2^32. */
  below(n: number): number;
  /** A uniform 64-bit word (a device secret). */
  word64(): bigint;
}

function webCrypto(): Crypto {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (c === undefined || typeof c.getRandomValues !== "function") {
    throw new Error("no crypto.getRandomValues here");
  }
  return c;
}

/** Draws from `crypto.getRandomValues`, 4 KiB at a time. */
export class CryptoRandom implements Random {
  readonly #words = new Uint32Array(BLOCK_WORDS);
  #next = BLOCK_WORDS;
  readonly #crypto = webCrypto();

  #u32(): number {
    if (this.#next === BLOCK_WORDS) {
      this.#crypto.getRandomValues(this.#words);
      this.#next = 0;
    }
    return this.#words[this.#next++];
  }

  uniform(): number {
    const high = this.#u32() >>> 5; // 27 bits
    const low = this.#u32() >>> 6; // 26 bits
    return (high * 67108864 + low) / 9007199254740992;
  }

  below(n: number): number {
    if (!(Number.isInteger(n) && n >= 1 && n <= 4294967296)) throw new RangeError(`below(${n})`);
    if (n === 4294967296) return this.#u32();
    const limit = 4294967296 - (4294967296 % n); // accept [0, limit): a whole number of copies of [0, n)
    for (;;) {
      const x = this.#u32();
      if (x < limit) return x % n;
    }
  }

  word64(): bigint {
    return (BigInt(this.#u32()) << 32n) | BigInt(this.#u32());
  }
}

/** True with probability p (a uniform on the 2^-53 grid below p, as numpy's `rng.random() < p`). */
export function bernoulli(rng: Random, p: number): boolean {
  return rng.uniform() < p;
}

/** Laplace(0, scale) by inversion of one uniform (numpy's `Generator.laplace` method). */
export function laplace(rng: Random, scale: number): number {
  let u = rng.uniform();
  while (u === 0) u = rng.uniform();
  // numpy: U in (0, 1); if U >= 0.5: -scale log(2 - 2U), else scale log(2U)
  return u >= 0.5 ? -scale * Math.log(2.0 - u - u) : scale * Math.log(u + u);
}

/** The number of failures before the first success of Bernoulli(p) trials, p in (0, 1]: P(j) = p (1 - p)^j. */
export function geometricFailures(rng: Random, p: number): number {
  if (p >= 1) return 0;
  // inversion: floor(log(U) / log(1 - p)) with U in (0, 1]
  const u = 1 - rng.uniform();
  return Math.floor(Math.log(u) / Math.log1p(-p));
}
