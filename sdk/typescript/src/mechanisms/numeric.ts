/**
 * Numeric mechanisms on [-1, 1] (`ldpstream.mechanisms.numeric`): Laplace, SCDF, Staircase, Duchi et al., the
 * Piecewise and Hybrid mechanisms, Harmony; each reports {"value": float64} with E[t*] = t, and declares the
 * coefficients (a, b) of its variance a + b t^2, from which `auto` chooses (`chooseSampled`).
 */

import { LDPError } from "../errors.js";
import { bernoulli, geometricFailures, laplace, type Random } from "../random.js";
import { checkEpsilon, column, type FreshMechanism, type Report } from "./base.js";

export const NUMERIC_MAX_EPSILON = 50.0;
/** 000 Eq. 6, as Python's math computes it (the constant, so that no libm's cube root can move it). */
export const EPSILON_STAR = 0.6093524930273093;

export function checkNumericEpsilon(epsilon: number): number {
  const eps = checkEpsilon(epsilon);
  if (eps > NUMERIC_MAX_EPSILON) {
    throw new LDPError(`epsilon ${eps} is above 50, the most for numeric mechanisms`);
  }
  return eps;
}

/** x in [lo, hi] as a value on [-1, 1] (what these mechanisms take). */
export function unit(lo: number, hi: number, x: number): number {
  return Math.min(Math.max((x - lo) / ((hi - lo) / 2.0) - 1.0, -1.0), 1.0);
}

export function checkUnit(t: number): number {
  if (typeof t !== "number" || !(t >= -1 && t <= 1)) throw new LDPError(`a value must lie in [-1, 1], got ${t}`);
  return t;
}

export abstract class NumericMechanism implements FreshMechanism<number> {
  abstract readonly name: string;
  abstract readonly autoRank: number;
  readonly autoOneDimensional: boolean = true;
  readonly epsilon: number;

  constructor(epsilon: number) {
    this.epsilon = checkNumericEpsilon(epsilon);
  }

  /** (a, b) with Var[t* | t] = a + b t^2. */
  abstract varianceCoefficients(): [number, number];

  /** One report of a validated t in [-1, 1]. */
  abstract sample(t: number, rng: Random): number;

  perturb(t: number, rng: Random): Report {
    return { value: column("<f8", this.sample(checkUnit(t), rng)) };
  }

  worstCaseVariance(): number {
    const [a, b] = this.varianceCoefficients();
    return a + Math.max(b, 0.0);
  }
}

export class Laplace extends NumericMechanism {
  readonly name = "laplace";
  readonly autoRank = 70;

  get scale(): number {
    return 2.0 / this.epsilon;
  }

  varianceCoefficients(): [number, number] {
    return [2.0 * this.scale ** 2, 0.0];
  }

  sample(t: number, rng: Random): number {
    return t + laplace(rng, this.scale);
  }
}

abstract class StaircaseNoise extends NumericMechanism {
  abstract get m(): number;
  abstract get a(): number;

  get ratio(): number {
    return Math.exp(-this.epsilon);
  }

  varianceCoefficients(): [number, number] {
    const m = this.m, a = this.a, r = this.ratio;
    const s0 = r / (1 - r), s1 = r ** 2 / (1 - r) ** 2, s2 = (r ** 2 * (1 + r)) / (1 - r) ** 3;
    return [2 * a * (m ** 3 / 3 + (2 * m ** 2 + 4 * m + 8 / 3) * s0 + (8 * m + 8) * s1 + 8 * s2), 0.0];
  }

  sample(t: number, rng: Random): number {
    const u = rng.uniform();
    const centre = bernoulli(rng, 2 * this.m * this.a);
    const step = geometricFailures(rng, 1.0 - this.ratio);
    const magnitude = centre ? this.m * u : this.m + 2.0 * (step + u);
    const sign = bernoulli(rng, 0.5) ? -1.0 : 1.0;
    return t + sign * magnitude;
  }
}

export class SCDF extends StaircaseNoise {
  readonly name = "scdf";
  readonly autoRank = 60;

  get m(): number {
    const e = this.epsilon, r = Math.exp(-this.epsilon);
    return (2 * (1 - r - e * r)) / (e - e * r);
  }

  get a(): number {
    return this.epsilon / 4;
  }
}

export class Staircase extends StaircaseNoise {
  readonly name = "staircase";
  readonly autoRank = 50;

  get m(): number {
    return 2 / (1 + Math.exp(this.epsilon / 2));
  }

  get a(): number {
    const m = this.m, r = Math.exp(-this.epsilon);
    return (1 - r) / (2 * m + 4 * r - 2 * m * r);
  }
}

/** B = (e^eps + 1) / (e^eps - 1) = 1 / tanh(eps / 2). */
export function duchiBound(epsilon: number): number {
  return 1.0 / Math.tanh(checkEpsilon(epsilon) / 2.0);
}

export class Duchi extends NumericMechanism {
  readonly name: string = "duchi";
  readonly autoRank: number = 40;
  readonly bound: number;

  constructor(epsilon: number) {
    super(epsilon);
    this.bound = duchiBound(this.epsilon);
  }

  varianceCoefficients(): [number, number] {
    return [this.bound ** 2, -1.0];
  }

  sample(t: number, rng: Random): number {
    return rng.uniform() < 0.5 + (0.5 * t) / this.bound ? this.bound : -this.bound;
  }
}

export class Harmony extends Duchi {
  override readonly name = "harmony";
  override readonly autoRank = 30;
  override readonly autoOneDimensional = false;
}

export class Piecewise extends NumericMechanism {
  readonly name = "pm";
  readonly autoRank = 20;
  readonly c: number;
  readonly #half: number;
  /** The largest report sent: C less 8 ulps, so that no libm's C (the aggregators' bound) is below it. */
  readonly #edge: number;

  constructor(epsilon: number) {
    super(epsilon);
    this.#half = Math.exp(this.epsilon / 2);
    this.c = (this.#half + 1) / (this.#half - 1);
    this.#edge = this.c * (1 - 2 ** -49);
  }

  get centreMass(): number {
    return this.#half / (this.#half + 1);
  }

  varianceCoefficients(): [number, number] {
    const h = this.#half;
    return [(h + 3) / (3 * (h - 1) ** 2), 1 / (h - 1)];
  }

  sample(t: number, rng: Random): number {
    const c = this.c, pc = this.centreMass;
    const u = rng.uniform();
    const left = ((c + 1) / 2) * t - (c - 1) / 2;
    let out: number;
    if (u < pc) out = left + (u / pc) * (c - 1);
    else {
      const sides = (u - pc) * ((c + 1) / (1 - pc)) - c; // uniform on [-C, 1)
      out = sides >= left ? sides + (c - 1) : sides;
    }
    return Math.min(Math.max(out, -this.#edge), this.#edge);
  }
}

export function hybridAlpha(epsilon: number): number {
  return epsilon > EPSILON_STAR ? 1 - Math.exp(-epsilon / 2) : 0.0;
}

export class Hybrid extends NumericMechanism {
  readonly name = "hm";
  readonly autoRank = 10;
  readonly alpha: number;
  readonly piecewise: Piecewise;
  readonly duchi: Duchi;

  constructor(epsilon: number) {
    super(epsilon);
    this.alpha = hybridAlpha(this.epsilon);
    this.piecewise = new Piecewise(this.epsilon);
    this.duchi = new Duchi(this.epsilon);
  }

  varianceCoefficients(): [number, number] {
    const [ap, bp] = this.piecewise.varianceCoefficients();
    const [ad, bd] = this.duchi.varianceCoefficients();
    const alpha = this.alpha;
    const b = alpha * bp + (1 - alpha) * bd;
    return [alpha * ap + (1 - alpha) * ad, Math.abs(b) < 1e-12 ? 0.0 : b];
  }

  sample(t: number, rng: Random): number {
    return rng.uniform() < this.alpha ? this.piecewise.sample(t, rng) : this.duchi.sample(t, rng);
  }
}

export const NUMERIC: Record<string, new (epsilon: number) => NumericMechanism> = {
  laplace: Laplace, scdf: SCDF, staircase: Staircase, duchi: Duchi, pm: Piecewise, hm: Hybrid, harmony: Harmony,
};

export function makeNumeric(name: string, epsilon: number): NumericMechanism {
  const cls = NUMERIC[name];
  if (cls === undefined) throw new LDPError(`${JSON.stringify(name)} is not a numeric mechanism`);
  return new cls(epsilon);
}

/** The 1-D candidates of `auto`, by auto_rank (Harmony, Duchi's mechanism in one dimension, left out). */
function oneDimensionalCandidates(): string[] {
  return Object.keys(NUMERIC).filter((n) => makeNumeric(n, 1.0).autoOneDimensional)
    .sort((a, b) => makeNumeric(a, 1.0).autoRank - makeNumeric(b, 1.0).autoRank);
}

/** Worst case over t of (d/k)(a + (1 + b) t^2) - t^2: the 1-D mechanism at eps/k for one of d attributes, k sampled. */
export function sampledWorstCaseVariance(name: string, epsilon: number, dims: number, k: number): number {
  const [a, b] = makeNumeric(name, checkEpsilon(epsilon) / k).varianceCoefficients();
  const scale = dims / k;
  return Math.max(scale * a, scale * (a + 1 + b) - 1);
}

/** The mixed collector's "auto" for a numeric attribute (`ldpstream.mechanisms.numeric.auto.choose_sampled`). */
export function chooseSampled(epsilon: number, dims: number, k: number): string {
  let best = "", bestVariance = Infinity;
  for (const name of oneDimensionalCandidates()) {
    const v = sampledWorstCaseVariance(name, epsilon, dims, k);
    if (v < bestVariance) {
      best = name;
      bestVariance = v;
    }
  }
  return best;
}
