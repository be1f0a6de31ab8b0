/**
 * Frequency oracles over codes 0..K-1 (`ldpstream.mechanisms.frequency`): GRR, SUE, OUE, BLH, OLH and the Hadamard
 * response, each a pure protocol with support probabilities (p, q), and `chooseFrequency`, the "auto" of a
 * categorical attribute (the least rare-value variance; ties within 1e-6 to the smaller report, then auto_rank).
 */

import { LDPError } from "../errors.js";
import type { Random } from "../random.js";
import { checkEpsilon, column, type FreshMechanism, type Report } from "./base.js";

export const MAX_DOMAIN_SIZE = 1 << 20;
export const FREQUENCY_MAX_EPSILON = 30.0;
export const HASH_PRIME = (1 << 24) - 3;
const SEED_BITS = 24;
const TIE_RTOL = 1e-6;

export function checkFrequencyEpsilon(epsilon: number): number {
  const eps = checkEpsilon(epsilon);
  if (eps > FREQUENCY_MAX_EPSILON) {
    throw new LDPError(`epsilon ${eps} is above 30, the most for frequency oracles`);
  }
  return eps;
}

export function checkDomainSize(k: number): number {
  if (typeof k !== "number" || !Number.isInteger(k) || k < 2 || k > MAX_DOMAIN_SIZE) {
    throw new LDPError(`domain size must be in [2, ${MAX_DOMAIN_SIZE}], got ${String(k)}`);
  }
  return k;
}

export function checkCode(code: number, k: number): number {
  if (!Number.isInteger(code) || code < 0 || code >= k) {
    throw new LDPError(`code ${code} is not in 0..${k - 1}`);
  }
  return code;
}

/** Keep `truth` when u < keep, else shift it by 1..size-1 (modulo size) picked by the same uniform
 * (`randomized_response_from_uniform`: one uniform decides both, so a keyed uniform gives a memoized response). */
export function randomizedResponseFromUniform(truth: number, size: number, keep: number, u: number): number {
  let shift = Math.floor((u - keep) * ((size - 1) / (1 - keep))) + 1;
  shift = Math.min(Math.max(shift, 0), size - 1);
  const out = truth + shift;
  return out >= size ? out - size : out;
}

export function randomizedResponse(truth: number, size: number, keep: number, rng: Random): number {
  return randomizedResponseFromUniform(truth, size, keep, rng.uniform());
}

/** n Var[f_hat] of a pure protocol at frequency f. */
export function pureVariance(p: number, q: number, f: number): number {
  return (q * (1 - q)) / (p - q) ** 2 + (f * (1 - p - q)) / (p - q);
}

export abstract class FrequencyOracle implements FreshMechanism<number> {
  abstract readonly name: string;
  abstract readonly autoRank: number;
  readonly epsilon: number;
  readonly domainSize: number;

  constructor(epsilon: number, domainSize: number) {
    this.epsilon = checkFrequencyEpsilon(epsilon);
    this.domainSize = checkDomainSize(domainSize);
  }

  abstract get p(): number;
  abstract get q(): number;
  abstract get reportBits(): number;
  abstract perturb(code: number, rng: Random): Report;

  get supportsPerReport(): number {
    return 1;
  }

  worstCaseVariance(): number {
    return pureVariance(this.p, this.q, 0.0) / this.supportsPerReport;
  }
}

export class GRR extends FrequencyOracle {
  readonly name: string = "grr";
  readonly autoRank: number = 10;

  get p(): number {
    return Math.exp(this.epsilon) / (Math.exp(this.epsilon) + this.domainSize - 1);
  }

  get q(): number {
    return 1.0 / (Math.exp(this.epsilon) + this.domainSize - 1);
  }

  get reportBits(): number {
    return Math.ceil(Math.log2(this.domainSize));
  }

  perturb(code: number, rng: Random): Report {
    return { value: column("<u4", randomizedResponse(checkCode(code, this.domainSize), this.domainSize, this.p, rng)) };
  }
}

/** Unary encoding: the own bit 1 with probability p (drawn afresh, never p + (1 - p) q), every other 1 with q. */
export abstract class UnaryEncoding extends FrequencyOracle {
  get reportBits(): number {
    return this.domainSize;
  }

  perturb(code: number, rng: Random): Report {
    checkCode(code, this.domainSize);
    const q = this.q;
    const bits: number[] = new Array(this.domainSize);
    for (let i = 0; i < this.domainSize; i++) bits[i] = rng.uniform() < q ? 1 : 0;
    bits[code] = rng.uniform() < this.p ? 1 : 0;
    return { bits: { dtype: "|u1", values: bits } };
  }
}

export class SUE extends UnaryEncoding {
  readonly name: string = "sue";
  readonly autoRank: number = 40;

  get p(): number {
    return Math.exp(this.epsilon / 2) / (Math.exp(this.epsilon / 2) + 1);
  }

  get q(): number {
    return 1.0 / (Math.exp(this.epsilon / 2) + 1);
  }
}

export class OUE extends UnaryEncoding {
  readonly name: string = "oue";
  readonly autoRank: number = 30;

  get p(): number {
    return 0.5;
  }

  get q(): number {
    return 1.0 / (Math.exp(this.epsilon) + 1);
  }
}

/** H_{a,b}(v) = floor(g ((a v + b) mod P) / P), exact: a v + b < 2^48 and g P < 2^48, and a quotient of integers below
 * 2^53 (correctly rounded, and at least 1 / P from the next integer above it) has the true floor. */
export function hashBucket(a: number, b: number, code: number, g: number): number {
  return Math.floor((((a * code + b) % HASH_PRIME) * g) / HASH_PRIME);
}

/** q* = p c + (1 - p)(1 - c) / (g - 1), c the family's exact collision probability. As in Python, where a float
 * times a Fraction is a float: c and 1 - c are rounded once each (a quotient of integers below 2^53, which a division
 * rounds correctly, as Python's float(Fraction) does), the rest is float arithmetic. */
export function otherSupportProbability(keep: number, g: number): number {
  const small = Math.floor(HASH_PRIME / g), big = HASH_PRIME % g;
  const pairs = big * (small + 1) * small + (g - big) * small * (small - 1); // below P^2 < 2^48: exact
  const all = HASH_PRIME * (HASH_PRIME - 1);
  return keep * (pairs / all) + ((1 - keep) * ((all - pairs) / all)) / (g - 1);
}

export function olhBuckets(epsilon: number): number {
  return Math.floor(Math.exp(epsilon) + 0.5) + 1;
}

export abstract class LocalHash extends FrequencyOracle {
  readonly g: number;
  readonly #keep: number;
  readonly #other: number;

  constructor(epsilon: number, domainSize: number) {
    super(epsilon, domainSize);
    this.g = this.buckets();
    if (!(this.g >= 2 && this.g < HASH_PRIME)) {
      throw new LDPError(`local hashing: g = ${this.g} is outside [2, ${HASH_PRIME})`);
    }
    const e = Math.exp(this.epsilon);
    this.#keep = e / (e + this.g - 1);
    this.#other = otherSupportProbability(this.#keep, this.g);
  }

  abstract buckets(): number;

  get p(): number {
    return this.#keep;
  }

  get q(): number {
    return this.#other;
  }

  get reportBits(): number {
    return 2 * SEED_BITS + Math.ceil(Math.log2(this.g));
  }

  perturb(code: number, rng: Random): Report {
    checkCode(code, this.domainSize);
    const a = 1 + rng.below(HASH_PRIME - 1);
    const b = rng.below(HASH_PRIME);
    const y = randomizedResponse(hashBucket(a, b, code, this.g), this.g, this.#keep, rng);
    return { a: column("<u4", a), b: column("<u4", b), y: column("<u4", y) };
  }
}

export class BLH extends LocalHash {
  readonly name = "blh";
  readonly autoRank = 60;

  buckets(): number {
    return 2;
  }
}

export class OLH extends LocalHash {
  readonly name = "olh";
  readonly autoRank = 50;

  buckets(): number {
    return olhBuckets(this.epsilon);
  }
}

/** 1 where H[s, v] = +1 (an even popcount of s & v), 0 where it is -1. */
export function hadamardBit(row: number, code: number): number {
  let x = (row & code) >>> 0;
  x ^= x >>> 16;
  x ^= x >>> 8;
  x ^= x >>> 4;
  x ^= x >>> 2;
  x ^= x >>> 1;
  return 1 - (x & 1);
}

function bitLength(x: number): number {
  return x === 0 ? 0 : 32 - Math.clz32(x);
}

export class HadamardResponse extends FrequencyOracle {
  readonly name = "hadamard";
  readonly autoRank = 20;

  get rows(): number {
    return 2 ** bitLength(this.domainSize - 1);
  }

  get p(): number {
    return Math.exp(this.epsilon) / (Math.exp(this.epsilon) + 1);
  }

  get q(): number {
    return 0.5;
  }

  get reportBits(): number {
    return bitLength(this.rows - 1) + 1;
  }

  perturb(code: number, rng: Random): Report {
    checkCode(code, this.domainSize);
    const row = rng.below(this.rows);
    const flip = rng.uniform() >= this.p ? 1 : 0;
    return { bit: column("|u1", hadamardBit(row, code) ^ flip), row: column("<u4", row) };
  }
}

export const FREQUENCY: Record<string, new (epsilon: number, domainSize: number) => FrequencyOracle> = {
  grr: GRR, sue: SUE, oue: OUE, blh: BLH, olh: OLH, hadamard: HadamardResponse,
};

export function makeFrequency(name: string, epsilon: number, domainSize: number): FrequencyOracle {
  const cls = FREQUENCY[name];
  if (cls === undefined) throw new LDPError(`${JSON.stringify(name)} is not a frequency oracle`);
  return new cls(epsilon, domainSize);
}

/** The oracle of least rare-value variance at (eps, K) (`ldpstream.mechanisms.frequency.auto.choose_frequency`). */
export function chooseFrequency(epsilon: number, domainSize: number): string {
  const oracles = Object.keys(FREQUENCY).map((name) => makeFrequency(name, epsilon, domainSize))
    .sort((a, b) => a.autoRank - b.autoRank);
  const best = Math.min(...oracles.map((o) => o.worstCaseVariance()));
  const tied = oracles.filter((o) => o.worstCaseVariance() <= best * (1 + TIE_RTOL))
    .map((o) => [o.reportBits, o.autoRank, o.name] as const);
  tied.sort((x, y) => x[0] - y[0] || x[1] - y[1] || (x[2] < y[2] ? -1 : 1));
  return tied[0][2];
}
