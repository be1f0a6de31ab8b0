/**
 * Memoized (longitudinal) mechanisms (`ldpstream.mechanisms.longitudinal`): a permanent response per (device, value),
 * a pure function of the device's attribute secret (`keyedWord`), perturbed afresh at every report. L-GRR, L-OUE,
 * L-OSUE, L-SUE, RAPPOR, 1BitMean and dBitFlip, each built from its two budgets (`withBudgets`) exactly as the Python
 * side builds it, so the permanent responses agree bit for bit (tests/vectors/memo.json).
 */

import {
  checkCode, checkDomainSize, checkEpsilon, checkFrequencyEpsilon, checkInteger, checkNumericEpsilon, checkUnit, column,
  duchiBound, formatG, GAMMA, LONGITUDINAL_KIND, keyedUniform, keyedWord, LDPError, type MemoizedMechanism, mix64, pureVariance,
  type Random, randomizedResponse, randomizedResponseFromUniform, type Report, TAG_ATTRIBUTE_SAMPLE, wordUniform,
} from "./shared.js";
import { symmetricSmallestEigenvalueRatioAbove } from "./linalg.js";
// The collector's keyed draws (u64.ts), here as only a device with a collection secret makes them: its spec has a
// privacy block, so its mechanisms are these.
export { attributeSecret } from "./shared.js";

/** The k attributes (by their name keys) that a device with collection secret `secret` reports, in order: those of
 * least keyed score, the same in every report (`ldpstream.mechanisms.mixed.MixedCollector._sampled`). */
export function keyedSample(secret: bigint, nameKeys: bigint[], k: number): number[] {
  const scores = nameKeys.map((key) => keyedUniform(secret, TAG_ATTRIBUTE_SAMPLE, key));
  return nameKeys.map((_, i) => i).sort((a, b) => scores[a] - scores[b] || a - b).slice(0, k).sort((a, b) => a - b);
}

/** The parameters a spec may set per memoized mechanism (`registry.longitudinal_parameters`). */
export const LONGITUDINAL_PARAMETERS: Record<string, readonly string[]> = {
  "l-grr": [], "l-oue": [], "l-osue": [], "l-sue": [], rappor: ["hashes", "bloom_bits", "cohorts"],
  "1bitmean": ["buckets"], dbitflip: ["sampled"],
};

// One tag per kind of memoized choice (`ldpstream.mechanisms.longitudinal.memo`; the collector's in u64.ts).
const TAG_PERMANENT = 0x51n;
const TAG_PERMANENT_TIE = 0x53n;
const TAG_COHORT = 0x54n;
const TAG_BLOOM = 0x5bn;
const TAG_ALPHA = 0x55n;
const TAG_SAMPLE = 0x56n;

/**
 * `width` Bernoulli(prob) bits memoized per (secret, key), 8 bits per keyed word, and `uniforms` keyed uniforms from
 * the words after them (`ldpstream.mechanisms.longitudinal.memo.keyed_bits`): byte B gives 1{B < floor(256 prob)},
 * and B equal to that threshold is decided by a uniform keyed by (secret, key, position).
 */
export function keyedBits(secret: bigint, key: bigint | number, width: number, prob: number,
                          uniforms = 0): { bits: Uint8Array; tail: number[] } {
  const words = Math.ceil(width / 8);
  const top = Math.floor(prob * 256);
  const rest = prob * 256 - top;
  const base = keyedWord(secret, TAG_PERMANENT, key);
  const bits = new Uint8Array(width);
  for (let w = 0; w < words; w++) {
    let word = mix64(base + ((BigInt(w) + 1n) * GAMMA));
    for (let b = 0; b < 8 && 8 * w + b < width; b++) {
      const byte = Number(word & 255n);
      word >>= 8n;
      const position = 8 * w + b;
      if (byte < top) bits[position] = 1;
      else if (byte === top) bits[position] = keyedUniform(secret, TAG_PERMANENT_TIE, key, position) < rest ? 1 : 0;
    }
  }
  const tail: number[] = [];
  for (let u = 0; u < uniforms; u++) tail.push(wordUniform(mix64(base + ((BigInt(words + u) + 1n) * GAMMA))));
  return { bits, tail };
}

export function checkBudgets(lifetime: number, first: number): [number, number] {
  checkEpsilon(lifetime);
  checkEpsilon(first);
  if (!(first < lifetime)) {
    throw new LDPError(`the one-report epsilon ${formatG(first)} must be below the lifetime epsilon ${formatG(lifetime)}`);
  }
  return [lifetime, first];
}

export function checkGamma(gamma: number): number {
  if (!(gamma >= 0 && gamma < 0.5)) throw new LDPError(`gamma must lie in [0, 1/2), got ${gamma}`);
  return gamma;
}

/** The flip probability that turns an eps-LDP bit into a target-LDP one. */
export function flipFor(epsilon: number, target: number): number {
  const lifetime = checkEpsilon(epsilon), first = checkEpsilon(target);
  if (first > lifetime) {
    throw new LDPError(`the one-report epsilon ${formatG(first)} must not exceed the lifetime epsilon ${formatG(lifetime)}`);
  }
  const big = Math.exp(lifetime), e = Math.exp(first);
  return (big - e) / ((big - 1) * (e + 1));
}

export function flippedEpsilon(epsilon: number, gamma: number): number {
  const e = Math.exp(epsilon);
  return Math.log((e * (1 - gamma) + gamma) / ((1 - gamma) + gamma * e));
}

function chain(p1: number, q1: number, p2: number, q2: number): [number, number] {
  return [p1 * p2 + (1 - p1) * q2, q1 * p2 + (1 - q1) * q2];
}

function unaryEpsilon(p: number, q: number): number {
  return Math.log(p / q) + Math.log1p(-q) - Math.log1p(-p);
}

/** A device's permanent bits: Bernoulli(pOther) bits memoized per (secret, code), Bernoulli(pOwn) at `own`. */
function permanentBits(secret: bigint, code: number, own: number[], width: number, pOwn: number,
                       pOther: number): Uint8Array {
  const { bits, tail } = keyedBits(secret, code, width, pOther, own.length);
  own.forEach((position, i) => {
    bits[position] = tail[i] < pOwn ? 1 : 0;
  });
  return bits;
}

/** Fresh bits: 1 with probability pSet where `bits` is set, pClear where it is clear. */
function instantaneousBits(bits: Uint8Array, pSet: number, pClear: number, rng: Random): number[] {
  const out: number[] = new Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = rng.uniform() < (bits[i] ? pSet : pClear) ? 1 : 0;
  return out;
}

abstract class TwoStage implements MemoizedMechanism<number> {
  abstract readonly name: string;
  abstract readonly autoRank: number;
  readonly kind = "frequency" as const;
  readonly epsilon: number;
  readonly epsilonLifetime: number;
  readonly domainSize: number;
  readonly p1: number;
  readonly q1: number;
  readonly p2: number;
  readonly q2: number;

  constructor(lifetime: number, first: number, domainSize: number, stage1: [number, number], stage2: [number, number]) {
    this.epsilon = checkFrequencyEpsilon(first);
    this.domainSize = checkDomainSize(domainSize);
    this.epsilonLifetime = checkFrequencyEpsilon(lifetime);
    [this.p1, this.q1] = stage1;
    [this.p2, this.q2] = stage2;
    if (!(this.q1 >= 0 && this.q1 < this.p1 && this.p1 <= 1 && this.q2 >= 0 && this.q2 < this.p2 && this.p2 <= 1)) {
      throw new LDPError(`${this.constructor.name}: stage probabilities are not 0 <= q < p <= 1`);
    }
  }

  get p(): number {
    return chain(this.p1, this.q1, this.p2, this.q2)[0];
  }

  get q(): number {
    return chain(this.p1, this.q1, this.p2, this.q2)[1];
  }

  worstCaseVariance(): number {
    return pureVariance(this.p, this.q, 0.0);
  }

  memoKey(code: number): number {
    return checkCode(code, this.domainSize);
  }

  parameters(): Record<string, number> {
    return { domain: this.domainSize, p1: this.p1, q1: this.q1, p2: this.p2, q2: this.q2 };
  }

  memoParameters(): [string, number][] {
    return [["epsilon_lifetime", this.epsilonLifetime], ["epsilon_first", this.epsilon], ["domain_size", this.domainSize]];
  }

  repr(): string {
    return `${this.className}(epsilon_lifetime=${formatG(this.epsilonLifetime)}, epsilon_first=${formatG(this.epsilon)}, `
      + `domain_size=${this.domainSize})`;
  }

  abstract get className(): string;
  abstract perturb(code: number, rng: Random, secret: bigint): Report;
}

/** Budgets of the solved two-stage oracles: (eps_inf, eps_1) checked as Python's `SolvedTwoStage` does. */
function solvedBudgets(lifetime: number, first: number, domainSize: number | null): [number, number, number] {
  const l = checkFrequencyEpsilon(lifetime);
  const [inf, one] = checkBudgets(l, first);
  return [inf, one, checkDomainSize(domainSize as number)];
}

export class LGRR extends TwoStage {
  readonly name = "l-grr";
  readonly autoRank = 110;
  readonly className = "LGRR";

  constructor(lifetime: number, first: number, domainSize: number | null) {
    const [inf, one, k] = solvedBudgets(lifetime, first, domainSize);
    const big = Math.exp(inf), e = Math.exp(one);
    const p2 = (e * (big + k - 2) - k + 1) / (Math.expm1(inf) * (e + k - 1));
    super(inf, one, k, [big / (big + k - 1), 1 / (big + k - 1)], [p2, (1 - p2) / (k - 1)]);
  }

  /** The memoized stage-1 code of a device (secret) for a value. */
  permanent(code: number, secret: bigint): number {
    return randomizedResponseFromUniform(code, this.domainSize, this.p1, keyedUniform(secret, TAG_PERMANENT, code));
  }

  perturb(code: number, rng: Random, secret: bigint): Report {
    const permanent = this.permanent(this.memoKey(code), secret);
    return { value: column("<u4", randomizedResponse(permanent, this.domainSize, this.p2, rng)) };
  }
}

abstract class TwoStageUnary extends TwoStage {
  permanent(code: number, secret: bigint): Uint8Array {
    return permanentBits(secret, code, [code], this.domainSize, this.p1, this.q1);
  }

  perturb(code: number, rng: Random, secret: bigint): Report {
    const permanent = this.permanent(this.memoKey(code), secret);
    return { bits: { dtype: "|u1", values: instantaneousBits(permanent, this.p2, this.q2, rng) } };
  }
}

function oueStage(epsilon: number): [number, number] {
  return [0.5, 1 / (Math.exp(epsilon) + 1)];
}

function sueStage(epsilon: number): [number, number] {
  return [1 / (1 + Math.exp(-epsilon / 2)), 1 / (Math.exp(epsilon / 2) + 1)];
}

export class LOUE extends TwoStageUnary {
  readonly name = "l-oue";
  readonly autoRank = 130;
  readonly className = "LOUE";

  constructor(lifetime: number, first: number, domainSize: number | null) {
    const [inf, one, k] = solvedBudgets(lifetime, first, domainSize);
    const big = Math.exp(inf), e = Math.exp(one);
    if (!(e < (2 * big + 1) / 3)) {
      throw new LDPError(`L-OUE reaches one-report budgets below ${Math.log((2 * big + 1) / 3).toPrecision(6)} at eps_inf `
                         + `${formatG(inf)}`);
    }
    const c = big / (big + 1);
    const a = 4 * c * (e - 1), b = 2 * (1 - e * (4 * c - 1)), c0 = (1 + c) - 3 * e * (1 - c);
    super(inf, one, k, oueStage(inf), [0.5, (2 * c0) / (-b + Math.sqrt(b * b - 4 * a * c0))]);
  }
}

export class LOSUE extends TwoStageUnary {
  readonly name = "l-osue";
  readonly autoRank = 120;
  readonly className = "LOSUE";

  constructor(lifetime: number, first: number, domainSize: number | null) {
    const [inf, one, k] = solvedBudgets(lifetime, first, domainSize);
    const p2 = (1 + Math.tanh(one / 2) / Math.tanh(inf / 2)) / 2;
    super(inf, one, k, oueStage(inf), [p2, 1 - p2]);
  }
}

export class LSUE extends TwoStageUnary {
  readonly name = "l-sue";
  readonly autoRank = 140;
  readonly className = "LSUE";

  constructor(lifetime: number, first: number, domainSize: number | null) {
    const [inf, one, k] = solvedBudgets(lifetime, first, domainSize);
    const p2 = (1 + Math.tanh(one / 4) / Math.tanh(inf / 4)) / 2;
    super(inf, one, k, sueStage(inf), [p2, 1 - p2]);
  }
}

const MAX_CANDIDATES = 1024;
const MAX_COHORTS = 1024;
const MAX_DESIGN_ENTRIES = 1 << 23;
const MIN_EIGENVALUE_RATIO = 1e-9;

function bitLength(x: number): number {
  return x === 0 ? 0 : x.toString(2).length;
}

export function defaultCohorts(domainSize: number, bloomBits: number): number {
  const need = Math.max(16, Math.ceil((8 * domainSize) / bloomBits));
  return 2 ** bitLength(need - 1);
}

export class RAPPOR implements MemoizedMechanism<number> {
  readonly name = "rappor";
  readonly autoRank = 150;
  readonly kind = "frequency" as const;
  readonly epsilon: number;
  readonly epsilonLifetime: number;
  readonly domainSize: number;
  readonly hashes: number;
  readonly bloomBits: number;
  readonly cohorts: number;
  readonly width: number;
  readonly f: number;
  readonly p1: number;
  readonly q1: number;
  readonly p2: number;
  readonly q2: number;
  readonly qStar: number;
  readonly pStar: number;
  private readonly positionCache = new Map<number, number[]>();

  constructor(lifetime: number, domainSize: number, hashes = 2, bloomBits = 32, cohorts: number | null = null,
              p = 0.5, q = 0.75) {
    const k = checkDomainSize(domainSize);
    if (k > MAX_CANDIDATES) throw new LDPError(`RAPPOR decodes at most ${MAX_CANDIDATES} candidate values, got ${k}`);
    const h = checkInteger("hashes", hashes, 1, 64);
    const bits = checkInteger("bloom_bits", bloomBits, 1, 4096);
    if (bits % h !== 0 || Math.floor(bits / h) < 2) {
      throw new LDPError(`bloom_bits must be a multiple of hashes (${h}) with at least 2 bits per hash, got ${bits}`);
    }
    const m = cohorts === null ? defaultCohorts(k, bits) : checkInteger("cohorts", cohorts, 1, MAX_COHORTS);
    if (m * bits * k > MAX_DESIGN_ENTRIES) {
      throw new LDPError(`RAPPOR's design of ${m} cohorts x ${bits} Bloom bits x ${k} values has more than `
                         + `${MAX_DESIGN_ENTRIES} entries`);
    }
    if (!(p >= 0 && p < q && q <= 1)) throw new LDPError(`RAPPOR needs 0 <= p < q <= 1, got p = ${p}, q = ${q}`);
    this.epsilonLifetime = checkFrequencyEpsilon(lifetime);
    this.domainSize = k;
    this.hashes = h;
    this.bloomBits = bits;
    this.cohorts = m;
    this.width = bits / h;
    this.f = 2 / (1 + Math.exp(this.epsilonLifetime / (2 * h)));
    [this.p1, this.q1, this.p2, this.q2] = [1 - this.f / 2, this.f / 2, q, p];
    [this.qStar, this.pStar] = chain(this.p1, this.q1, this.p2, this.q2);
    this.epsilon = checkEpsilon(h * unaryEpsilon(this.qStar, this.pStar));
    if (!symmetricSmallestEigenvalueRatioAbove(this.gram(), MIN_EIGENVALUE_RATIO)) {
      throw new LDPError(`RAPPOR with ${m} cohorts of ${bits} Bloom bits (${h} hashes) cannot tell the ${k} candidate `
                         + "values apart (singular design): use more cohorts or Bloom bits");
    }
  }

  /** RAPPOR with a symmetric IRR solved for eps_1 (`RAPPOR.with_budgets`). */
  static withBudgets(lifetime: number, first: number, domainSize: number | null, hashes = 2, bloomBits = 32,
                     cohorts: number | null = null): RAPPOR {
    const [inf, one] = checkBudgets(lifetime, first);
    const h = checkInteger("hashes", hashes, 1, 64);
    const f = 2 / (1 + Math.exp(inf / (2 * h)));
    const q = 0.5 + (1 / (1 + Math.exp(-one / (2 * h))) - 0.5) / (1 - f);
    return new RAPPOR(inf, domainSize as number, h, bloomBits, cohorts, 1 - q, q);
  }

  /** The h Bloom bits of value v in cohort c (public hashes keyed by the cohort). */
  positions(cohort: number, code: number): number[] {
    const key = cohort * this.domainSize + code;
    let out = this.positionCache.get(key);
    if (out === undefined) {
      out = [];
      for (let r = 0; r < this.hashes; r++) {
        out.push(Number(keyedWord(BigInt(cohort), TAG_BLOOM, code, r) % BigInt(this.width)) + this.width * r);
      }
      if (this.positionCache.size < 1 << 16) this.positionCache.set(key, out);
    }
    return out;
  }

  /** X^T X of the design: entry (u, v) counts the (cohort, bit) rows set by both u and v. */
  private gram(): Float64Array[] {
    const k = this.domainSize;
    const g = Array.from({ length: k }, () => new Float64Array(k));
    const owners = new Map<number, number[]>();
    for (let c = 0; c < this.cohorts; c++) {
      owners.clear();
      for (let v = 0; v < k; v++) {
        for (const bit of this.positions(c, v)) {
          const list = owners.get(bit);
          if (list === undefined) owners.set(bit, [v]);
          else list.push(v);
        }
      }
      for (const list of owners.values()) for (const u of list) for (const v of list) g[u][v] += 1;
      this.positionCache.clear();
    }
    return g;
  }

  deviceCohort(secret: bigint): number {
    return Math.floor(keyedUniform(secret, TAG_COHORT) * this.cohorts);
  }

  permanent(code: number, secret: bigint): { cohort: number; bits: Uint8Array } {
    const cohort = this.deviceCohort(secret);
    return { cohort, bits: permanentBits(secret, code, this.positions(cohort, code), this.bloomBits, this.p1, this.q1) };
  }

  memoKey(code: number): number {
    return checkCode(code, this.domainSize);
  }

  perturb(code: number, rng: Random, secret: bigint): Report {
    const { cohort, bits } = this.permanent(this.memoKey(code), secret);
    return { bits: { dtype: "|u1", values: instantaneousBits(bits, this.p2, this.q2, rng) }, cohort: column("<u4", cohort) };
  }

  /** Not compared by `auto` (RAPPOR is chosen by name only). */
  worstCaseVariance(): number {
    return NaN;
  }

  parameters(): Record<string, number> {
    return { domain: this.domainSize, hashes: this.hashes, bloom_bits: this.bloomBits, cohorts: this.cohorts, f: this.f,
             p: this.q2, q: this.p2, p_star: this.pStar, q_star: this.qStar };
  }

  memoParameters(): [string, number][] {
    return [["epsilon_lifetime", this.epsilonLifetime], ["domain_size", this.domainSize], ["hashes", this.hashes],
            ["bloom_bits", this.bloomBits], ["cohorts", this.cohorts]];
  }

  repr(): string {
    return `RAPPOR(epsilon_lifetime=${formatG(this.epsilonLifetime)}, domain_size=${this.domainSize}, `
      + `hashes=${this.hashes}, bloom_bits=${this.bloomBits}, cohorts=${this.cohorts})`;
  }
}

const MAX_BUCKETS = 1 << 20;

export class OneBitMean implements MemoizedMechanism<number> {
  readonly name = "1bitmean";
  readonly autoRank = 160;
  readonly kind = "numeric" as const;
  readonly epsilon: number;
  readonly epsilonLifetime: number;
  readonly gamma: number;
  readonly buckets: number;
  readonly bound: number;
  private readonly lifetimeBound: number;

  constructor(lifetime: number, buckets = 8, gamma = 0.0) {
    const l = checkNumericEpsilon(lifetime), g = checkGamma(gamma);
    checkInteger("buckets", buckets, 1, MAX_BUCKETS);
    this.epsilon = checkNumericEpsilon(flippedEpsilon(l, g));
    this.epsilonLifetime = l;
    this.gamma = g;
    this.buckets = buckets;
    this.bound = duchiBound(this.epsilon);
    this.lifetimeBound = duchiBound(l);
  }

  static withBudgets(lifetime: number, first: number, domainSize: number | null, buckets = 8): OneBitMean {
    if (domainSize !== null) throw new LDPError(`1bitmean is numeric: it takes no domain size, got ${domainSize}`);
    return new OneBitMean(lifetime, buckets, flipFor(lifetime, first));
  }

  /** The grid point after alpha-point rounding: the memo key. */
  memoKey(t: number, secret: bigint): number {
    checkUnit(t);
    const x = (t + 1.0) * (this.buckets / 2.0);
    const low = Math.floor(x);
    const alpha = keyedUniform(secret, TAG_ALPHA);
    return Math.min(low + (x - low + alpha >= 1.0 ? 1 : 0), this.buckets);
  }

  /** The memoized bit of a device for grid point `grid`. */
  permanent(grid: number, secret: bigint): boolean {
    const rounded = grid * (2.0 / this.buckets) - 1.0;
    const keep = 0.5 + (0.5 * rounded) / this.lifetimeBound;
    return keyedUniform(secret, TAG_PERMANENT, grid) < keep;
  }

  perturb(t: number, rng: Random, secret: bigint): Report {
    const bit = this.permanent(this.memoKey(t, secret), secret) !== (rng.uniform() < this.gamma);
    return { value: column("<f8", bit ? this.bound : -this.bound) };
  }

  worstCaseVariance(): number {
    return this.bound ** 2;
  }

  parameters(): Record<string, number> {
    return { buckets: this.buckets, gamma: this.gamma, bound: this.bound };
  }

  memoParameters(): [string, number][] {
    return [["epsilon_lifetime", this.epsilonLifetime], ["buckets", this.buckets], ["gamma", this.gamma]];
  }

  repr(): string {
    return `OneBitMean(epsilon_lifetime=${formatG(this.epsilonLifetime)}, buckets=${this.buckets}, `
      + `gamma=${formatG(this.gamma)})`;
  }
}

export class DBitFlip implements MemoizedMechanism<number> {
  readonly name = "dbitflip";
  readonly autoRank = 170;
  readonly kind = "frequency" as const;
  readonly epsilon: number;
  readonly epsilonLifetime: number;
  readonly domainSize: number;
  readonly sampled: number;
  readonly gamma: number;
  readonly memoOwn: number;
  readonly pOwn: number;
  readonly pOther: number;

  constructor(lifetime: number, domainSize: number, sampled = 1, gamma = 0.0) {
    const l = checkFrequencyEpsilon(lifetime), k = checkDomainSize(domainSize), g = checkGamma(gamma);
    this.sampled = checkInteger("sampled buckets d", sampled, 1, k);
    this.epsilonLifetime = l;
    this.domainSize = k;
    this.gamma = g;
    const differing = Math.min(2, this.sampled);
    this.epsilon = differing * flippedEpsilon(l / differing, g);
    this.memoOwn = 1 / (1 + Math.exp(-l / differing));
    this.pOwn = g + (1 - 2 * g) * this.memoOwn;
    this.pOther = g + (1 - 2 * g) * (1 - this.memoOwn);
  }

  static withBudgets(lifetime: number, first: number, domainSize: number | null, sampled = 1): DBitFlip {
    const differing = Math.min(2, sampled);
    return new DBitFlip(lifetime, domainSize as number, sampled, flipFor(lifetime / differing, first / differing));
  }

  /** The d buckets a device samples (Floyd's algorithm on keyed uniforms), ascending. */
  sampledBuckets(secret: bigint): number[] {
    const d = this.sampled, k = this.domainSize;
    const chosen: number[] = [];
    for (let i = 0; i < d; i++) {
      const top = k - d + i;
      const draw = Math.floor(keyedUniform(secret, TAG_SAMPLE, i) * (top + 1));
      chosen.push(chosen.includes(draw) ? top : draw);
    }
    return chosen.sort((a, b) => a - b);
  }

  /** The memoized bits of a device for a value, at its sampled buckets. */
  permanent(code: number, secret: bigint): { buckets: number[]; bits: number[] } {
    const buckets = this.sampledBuckets(secret);
    const memo = keyedBits(secret, code, this.sampled, 1 - this.memoOwn).bits;
    return { buckets, bits: buckets.map((b, i) => memo[i] ^ (b === code ? 1 : 0)) };
  }

  memoKey(code: number): number {
    return checkCode(code, this.domainSize);
  }

  perturb(code: number, rng: Random, secret: bigint): Report {
    const { buckets, bits } = this.permanent(this.memoKey(code), secret);
    return {
      bits: { dtype: "|u1", values: bits.map((b) => b ^ (rng.uniform() < this.gamma ? 1 : 0)) },
      buckets: { dtype: "<u4", values: buckets },
    };
  }

  worstCaseVariance(): number {
    const scale = this.domainSize / this.sampled, delta2 = (this.pOwn - this.pOther) ** 2;
    return (scale * this.pOther * (1 - this.pOther)) / delta2;
  }

  parameters(): Record<string, number> {
    return { domain: this.domainSize, sampled: this.sampled, gamma: this.gamma, p_own: this.pOwn, p_other: this.pOther };
  }

  memoParameters(): [string, number][] {
    return [["epsilon_lifetime", this.epsilonLifetime], ["domain_size", this.domainSize], ["sampled", this.sampled],
            ["gamma", this.gamma]];
  }

  repr(): string {
    return `DBitFlip(epsilon_lifetime=${formatG(this.epsilonLifetime)}, domain_size=${this.domainSize}, `
      + `sampled=${this.sampled}, gamma=${formatG(this.gamma)})`;
  }
}

/** The memo names' version (docs/reference/protocol.md, "Memo naming"). */
const MEMO_NAMING = "m1";

/**
 * The name of `attribute`'s memos under `mech` without their key (`ldpstream.device.perturb.memo_prefix`): each
 * parameter as the 16 hex digits of its IEEE 754 binary64 bits, big-endian; and their legacy one (Python's repr).
 */
export function memoPrefixes(attribute: string, mech: MemoizedMechanism<number>): [string, string] {
  const view = new DataView(new ArrayBuffer(8));
  const hex = (v: number) => {
    view.setFloat64(0, v);
    return view.getBigUint64(0).toString(16).padStart(16, "0");
  };
  const values = mech.memoParameters().map(([k, v]) => `${k}=${hex(v)}`).join(",");
  return [`${MEMO_NAMING}/${attribute}/${mech.name}/${values}/`, `${attribute}/${mech.repr()}/`];
}

/** The memo `key` of `attribute` under `mech` reads: its name, cost and legacy name (`Collector.memos`). */
export function memoOf(attribute: string, mech: MemoizedMechanism<number>, key: number):
    { key: string; epsilon: number; legacy: string } {
  const [prefix, legacy] = memoPrefixes(attribute, mech);
  return { key: `${prefix}${key}`, epsilon: mech.epsilonLifetime, legacy: `${legacy}${key}` };
}

/** The memoized mechanism `name` for budgets (eps_inf, eps_1) (`registry.make_longitudinal`). */
export function makeLongitudinal(name: string, lifetime: number, first: number, domainSize: number | null,
                                  parameters: Record<string, number> = {}): MemoizedMechanism<number> {
  const accepted = LONGITUDINAL_PARAMETERS[name];
  if (accepted === undefined) throw new LDPError(`unknown longitudinal mechanism ${JSON.stringify(name)}`);
  const unknown = Object.keys(parameters).filter((p) => !accepted.includes(p)).sort();
  if (unknown.length) {
    const takes = accepted.length ? `it takes ${accepted.join(", ")}` : "it takes none";
    throw new LDPError(`'${name}' has no parameter ${unknown.map((u) => `'${u}'`).join(", ")} (${takes})`);
  }
  const P = parameters;
  switch (name) {
    case "l-grr": return new LGRR(lifetime, first, domainSize);
    case "l-oue": return new LOUE(lifetime, first, domainSize);
    case "l-osue": return new LOSUE(lifetime, first, domainSize);
    case "l-sue": return new LSUE(lifetime, first, domainSize);
    case "rappor": return RAPPOR.withBudgets(lifetime, first, domainSize, P.hashes ?? 2, P.bloom_bits ?? 32, P.cohorts ?? null);
    case "1bitmean": return OneBitMean.withBudgets(lifetime, first, domainSize, P.buckets ?? 8);
    default: return DBitFlip.withBudgets(lifetime, first, domainSize, P.sampled ?? 1);
  }
}

/** A numeric or categorical attribute's memoized mechanism (a spec with a privacy block), "auto" resolved (the
 * collector's, `ldpstream.contract.collector`): `domain` its number of categories (null: numeric), `lifetime` and `eps`
 * its shares of the budgets. */
export function attributeMechanism(a: { name: string; mechanism: string; parameters: Record<string, number> },
                                   domain: number | null, lifetime: number, eps: number): MemoizedMechanism<number> {
  const kind = domain === null ? "numeric" : "frequency";
  const name = a.mechanism === "auto" ? chooseLongitudinal(kind, lifetime, eps, domain) : a.mechanism;
  if (LONGITUDINAL_KIND[name] !== kind) throw new LDPError(`attribute '${a.name}': '${name}' is not a memoized ${kind} mechanism`);
  return makeLongitudinal(name, lifetime, eps, domain, a.parameters);
}

/** "auto" of a memoized attribute (`ldpstream.mechanisms.longitudinal.auto.choose_longitudinal`). */
export function chooseLongitudinal(kind: "frequency" | "numeric", lifetime: number, first: number,
                                   domainSize: number | null): string {
  if (kind === "numeric") return "1bitmean";
  const built: TwoStage[] = [];
  const errors: string[] = [];
  for (const name of ["l-grr", "l-osue", "l-oue", "l-sue"]) { // by auto_rank
    try {
      built.push(makeLongitudinal(name, lifetime, first, domainSize) as TwoStage);
    } catch (exc) {
      if (!(exc instanceof LDPError)) throw exc;
      errors.push(`${name}: ${exc.message}`);
    }
  }
  if (!built.length) throw new LDPError(`no longitudinal frequency oracle reaches these budgets (${errors.join("; ")})`);
  const variances = built.map((m) => m.worstCaseVariance());
  const best = Math.min(...variances);
  return built[variances.findIndex((v) => v <= best * (1 + 1e-9))].name;
}
