/**
 * Distribution mechanisms on the device (`ldpstream.mechanisms.distribution`): a numeric attribute names one to get
 * its distribution as well as its mean. Only the perturbation lives here (the collector reconstructs):
 *
 * - Square Wave (`sw`; Li et al., SIGMOD 2020): the report t* = u / s, u with density p/2 within w = 2 b of t and
 *   q/2 elsewhere on [-1 - w, 1 + w], drawn from one uniform by the inverse CDF (`fromUniform`);
 * - hierarchical histograms (`hh`; Cormode, Kulkarni, Srivastava, VLDB 2019): a uniformly drawn level of the
 *   fanout-ary tree over `bins` bins, and Hadamard randomized response on the node of that level holding the value
 *   ({level, row, bit}, from three uniforms: `fromUniforms`).
 *
 * Loaded on demand (`optional.ts`): most specs name neither.
 */

import {
  checkEpsilon, checkInteger, checkUnit, column, DISTRIBUTION_PARAMETERS, formatG, type FreshMechanism, hadamardBit,
  LDPError, NumericMechanism, type Random, type Report,
} from "./shared.js";

export { DISTRIBUTION_PARAMETERS } from "./shared.js";

export const MIN_BINS = 4, MAX_BINS = 1024, MAX_EPSILON = 20.0, MAX_FANOUT = 16;
export const DEFAULT_BINS = 64, DEFAULT_FANOUT = 4;

/** `check_distribution_epsilon`: finite, > 0 and at most 20. */
export function checkDistributionEpsilon(epsilon: number): number {
  const eps = checkEpsilon(epsilon);
  if (eps > MAX_EPSILON) {
    throw new LDPError(`epsilon ${formatG(eps)} is above the supported maximum ${formatG(MAX_EPSILON)} for distribution mechanisms`);
  }
  return eps;
}

export function checkBins(bins: unknown): number {
  return checkInteger("bins", bins, MIN_BINS, MAX_BINS);
}

/** A smoothing level (the collector's EMS only; checked so that the device refuses what Python refuses). */
export function checkSmoothing(level: unknown): number {
  if (typeof level !== "number" || !((level > 0 && level <= 1) || level === 2 || level === 4)) {
    throw new LDPError(`the smoothing level must lie in (0, 1] or be 2 or 4, got ${String(level)}`);
  }
  return level;
}

/** b = (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps)) on [0, 1], by expm1 (precise as eps -> 0). */
export function squareWaveHalfWidth(epsilon: number): number {
  const e = Math.exp(epsilon);
  return (epsilon * e - Math.expm1(epsilon)) / (2.0 * e * (Math.expm1(epsilon) - epsilon));
}

export class SquareWave extends NumericMechanism {
  readonly name = "sw";
  readonly autoRank = 10;
  override readonly autoOneDimensional = false;
  readonly bins: number;
  readonly smoothing: number | null;
  /** b on [0, 1]; p and q the densities there; w = 2 b the window on [-1, 1]; s = w (p - q), E[u | t] = s t. */
  readonly halfWidth: number;
  readonly p: number;
  readonly q: number;
  readonly window: number;
  readonly scale: number;

  constructor(epsilon: number, bins: number = DEFAULT_BINS, smoothing: number | null = null) {
    super(checkDistributionEpsilon(epsilon));
    this.bins = checkBins(bins);
    this.smoothing = smoothing === null ? null : checkSmoothing(smoothing);
    const e = Math.exp(this.epsilon);
    this.halfWidth = squareWaveHalfWidth(this.epsilon);
    this.p = e / (2.0 * this.halfWidth * e + 1.0);
    this.q = 1.0 / (2.0 * this.halfWidth * e + 1.0);
    this.window = 2.0 * this.halfWidth;
    this.scale = this.window * (this.p - this.q);
  }

  varianceCoefficients(): [number, number] {
    const s = this.scale, w = this.window;
    return [(this.q * (1.0 + w) ** 3 / 3.0 + (s * w * w) / 3.0) / s ** 2, (1.0 - s) / s];
  }

  /** The report t* of t in [-1, 1] from one uniform u in [0, 1), by the inverse CDF (as Python's `from_uniform`). */
  fromUniform(t: number, u: number): number {
    const b = this.halfWidth, p = this.p, q = this.q;
    const v = (t + 1.0) / 2.0;
    const left = q * v, window = 2.0 * b * p;
    let y: number;
    if (u < left) y = u / q - b;
    else if (u < left + window) y = v - b + (u - left) / p;
    else y = v + b + (u - left - window) / q;
    y = Math.min(Math.max(y, -b), 1.0 + b); // floating-point rounding only
    return (2.0 * y - 1.0) / this.scale;
  }

  sample(t: number, rng: Random): number {
    return this.fromUniform(t, rng.uniform());
  }
}

/** One hierarchical-histogram report. */
export interface TreeReport {
  level: number;
  row: number;
  bit: number;
}

export class HierarchicalHistogram implements FreshMechanism<number> {
  readonly name = "hh";
  readonly epsilon: number;
  readonly bins: number;
  readonly fanout: number;
  /** h: the levels 1..h below the root; m: the Hadamard rows (the power of two >= bins); p: P[the bit is kept]. */
  readonly height: number;
  readonly rows: number;
  readonly p: number;

  constructor(epsilon: number, bins: number = DEFAULT_BINS, fanout: number = DEFAULT_FANOUT) {
    this.epsilon = checkDistributionEpsilon(epsilon);
    this.bins = checkBins(bins);
    this.fanout = checkInteger("fanout", fanout, 2, MAX_FANOUT);
    let height = 0, size = 1;
    while (size < this.bins) {
      size *= this.fanout;
      height++;
    }
    if (size !== this.bins) throw new LDPError(`bins must be a power of the fanout ${this.fanout}, got ${this.bins}`);
    this.height = height;
    let rows = 1;
    while (rows < this.bins) rows *= 2;
    this.rows = rows;
    const e = Math.exp(this.epsilon);
    this.p = e / (e + 1.0);
  }

  /** The bin of t in [-1, 1] (the last bin includes 1). */
  leaf(t: number): number {
    return Math.min(Math.max(Math.floor(((t + 1.0) / 2.0) * this.bins), 0), this.bins - 1);
  }

  /** The report of t from three uniforms in [0, 1) (as Python's `from_uniforms`): level 1 + floor(u0 h), row
   * floor(u1 m), and the bit H[row, node] kept when u2 < p. */
  fromUniforms(t: number, u: readonly [number, number, number] | readonly number[]): TreeReport {
    const h = this.height;
    const level = 1 + Math.min(Math.floor(u[0] * h), h - 1);
    const row = Math.min(Math.floor(u[1] * this.rows), this.rows - 1);
    const node = Math.floor(this.leaf(t) / this.fanout ** (h - level));
    const flip = u[2] >= this.p ? 1 : 0;
    return { level, row, bit: hadamardBit(row, node) ^ flip };
  }

  perturb(t: number, rng: Random): Report {
    const r = this.fromUniforms(checkUnit(t), [rng.uniform(), rng.uniform(), rng.uniform()]);
    return { level: column("|u1", r.level), row: column("<u4", r.row), bit: column("|u1", r.bit) };
  }
}

/** The distribution mechanism `name` at eps with the spec's `parameters` (`registry.make_distribution`). */
export function makeDistribution(name: string, epsilon: number,
                                 parameters: Record<string, number> = {}): SquareWave | HierarchicalHistogram {
  const accepted = DISTRIBUTION_PARAMETERS[name];
  if (accepted === undefined) throw new LDPError(`unknown distribution mechanism ${JSON.stringify(name)}; known: ${JSON.stringify(Object.keys(DISTRIBUTION_PARAMETERS))}`);
  const unknown = Object.keys(parameters).filter((p) => !accepted.includes(p)).sort();
  if (unknown.length) {
    throw new LDPError(`'${name}' has no parameter ${unknown.map((u) => `'${u}'`).join(", ")} (it takes ${accepted.join(", ")})`);
  }
  const P = parameters;
  return name === "sw"
    ? new SquareWave(epsilon, P.bins ?? DEFAULT_BINS, P.smoothing ?? null)
    : new HierarchicalHistogram(epsilon, P.bins ?? DEFAULT_BINS, P.fanout ?? DEFAULT_FANOUT);
}
