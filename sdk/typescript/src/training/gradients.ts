/**
 * The gradient randomizers on the device: ONE device's clipped vector in, its report columns out
 * (`ldpstream.mechanisms.gradients`, whose module docstrings derive privacy, unbiasedness and error; the Python
 * mechanisms decode and average what these send). Every draw comes from the SDK's `Random` (uniforms on the 2^-53
 * grid, `below`, `word64`), in the order written here, so a scripted source gives the reports the Python device
 * makes from the same draws:
 *
 * - a standard normal is `ndtri(u)` of one uniform u in (0, 1) (a u of exactly 0 is drawn again);
 * - `round_to_sphere(x)` (DJW18's first step): a zero x draws d normals for its direction first; then one uniform
 *   u, and the sign is + iff u < (1 + ||x||) / 2;
 * - PrivUnitG / PrivUnit2 (AFT22 / BDFKR18): `above` = uniform < p, then u = 1 - uniform, alpha by inversion of the
 *   base law's cdf at u (the cap or its complement), then d normals for the orthogonal part;
 * - duchi-l2 (DJW18): round to the sphere, d normals (a uniform direction), one uniform for the hemisphere;
 * - projunit (AFNNT23): the seed first (`word64() >> 1`, 63 bits), then round to the sphere, project, PrivUnitG in k;
 * - pm, hm (000 Alg. 4): the k sampled coordinates by a partial Fisher-Yates shuffle (`below(d - i)` for i < k), then
 *   each sampled coordinate's 1-D report at eps / k in that order, scaled by d / k;
 * - duchi (000 Alg. 3, 001 Sec. 3.1's fix): d uniforms for the rounded signs, one uniform for the number of
 *   agreements a, then the a agreeing coordinates by a partial Fisher-Yates shuffle.
 *
 * Pure: no I/O, nothing from the device or the collector.
 */

import { Hybrid, Piecewise, type NumericMechanism } from "../mechanisms/numeric.js";
import type { Random } from "../random.js";
import { GAMMA, MASK64, mix64 } from "../u64.js";
import { type ClipNorm, ModelError } from "./model.js";
import { betaincinv, expit, lbeta, lgamma, ndtri } from "./special.js";

export type GradientColumn =
  | { dtype: "<f8"; values: Float64Array }
  | { dtype: "<f4"; values: Float32Array }
  | { dtype: "<i8"; values: BigInt64Array };

/** One device's report, by column name (the Python mechanism's report columns, one row). */
export type GradientReport = Record<string, GradientColumn>;

export interface GradientMechanism {
  readonly name: string;
  readonly norm: ClipNorm;
  readonly dims: number;
  readonly epsilon: number;
  /** The report of one clipped vector (in the unit ball of `norm`; checked). */
  perturb(x: Float64Array, rng: Random): GradientReport;
}

export const GRADIENT_MECHANISMS = ["privunitg", "privunit2", "projunit", "duchi-l2", "pm", "hm", "duchi"] as const;
const L2_SLACK = 1e-9;
const NUMERIC_MAX_EPSILON = 50;
const PROJECTED_DIMS = 1000;
const MAX_DUCHI_DIMS = 1023;
const P_GRID = 241;

function checkEpsilon(epsilon: number): number {
  if (!(typeof epsilon === "number" && Number.isFinite(epsilon) && epsilon > 0 && epsilon <= NUMERIC_MAX_EPSILON)) {
    throw new ModelError(`epsilon must lie in (0, ${NUMERIC_MAX_EPSILON}], got ${String(epsilon)}`);
  }
  return epsilon;
}

function checkDimsValue(dims: number, what = "dims"): number {
  if (!(Number.isInteger(dims) && dims >= 1)) throw new ModelError(`${what} must be a positive integer, got ${String(dims)}`);
  return dims;
}

function norm2(x: Float64Array): number {
  let s = 0;
  for (let j = 0; j < x.length; j++) s += x[j] * x[j];
  return Math.sqrt(s);
}

function checkVector(x: Float64Array, dims: number, norm: ClipNorm): void {
  if (x.length !== dims) throw new ModelError(`expected a gradient of dimension ${dims}, got ${x.length}`);
  for (let j = 0; j < x.length; j++) if (!Number.isFinite(x[j])) throw new ModelError("the gradient holds NaN or infinities");
  if (norm === "l2") {
    const r = norm2(x);
    if (!(r <= 1 + L2_SLACK)) throw new ModelError(`the gradient must be clipped to L2 norm 1; it has norm ${r}`);
  } else {
    for (let j = 0; j < x.length; j++) if (Math.abs(x[j]) > 1) throw new ModelError("the gradient must be clipped to [-1, 1]^d");
  }
}

/** A standard normal: ndtri of one uniform in (0, 1). */
export function standardNormal(rng: Random): number {
  let u = rng.uniform();
  while (u === 0) u = rng.uniform();
  return ndtri(u);
}

function normals(rng: Random, d: number): Float64Array {
  const out = new Float64Array(d);
  for (let j = 0; j < d; j++) out[j] = standardNormal(rng);
  return out;
}

/** x / ||x||, or e_1 for a zero x. */
function unit(x: Float64Array): Float64Array {
  const r = norm2(x);
  if (r > 0) for (let j = 0; j < x.length; j++) x[j] /= r;
  else x[0] = 1;
  return x;
}

/** A unit v with E[v] = x for ||x|| <= 1 (`ldpstream.mechanisms.gradients.base.round_to_sphere`). */
export function roundToSphere(x: Float64Array, rng: Random): Float64Array {
  const r = norm2(x);
  let direction: Float64Array;
  if (r === 0) {
    direction = normals(rng, x.length);
    const rd = norm2(direction);
    if (rd > 0) for (let j = 0; j < direction.length; j++) direction[j] /= rd;
  } else {
    direction = Float64Array.from(x, (v) => v / r);
  }
  if (!(rng.uniform() < (1 + Math.min(r, 1)) / 2)) for (let j = 0; j < direction.length; j++) direction[j] = -direction[j];
  return direction;
}

/** g - <g, v> v in place (v a unit vector). */
function orthogonalPart(g: Float64Array, v: Float64Array): Float64Array {
  let dot = 0;
  for (let j = 0; j < g.length; j++) dot += g[j] * v[j];
  for (let j = 0; j < g.length; j++) g[j] -= dot * v[j];
  return g;
}

// ---- PrivUnitG and PrivUnit2: cap parameters (ldpstream.mechanisms.gradients.privunit) ----

export interface CapParameters {
  p: number;
  gamma: number;
  q: number;
  scale: number;
  secondMoment: number;
  mse: number;
}

type CapKind = "gaussian" | "sphere";

function capOdds(logit: number, epsilon: number): [number, number, number, number] {
  return [expit(logit), expit(-logit), expit(logit - epsilon), expit(epsilon - logit)];
}

/** PrivUnitG's parameters for p = expit(logit). */
export function gaussianCap(logit: number, epsilon: number, dims: number): CapParameters {
  const [p, notP, q, notQ] = capOdds(logit, epsilon);
  const gamma = -ndtri(q);
  const phi = Math.exp((-gamma * gamma) / 2) / Math.sqrt(2 * Math.PI);
  const scale = phi * (p / q - notP / notQ);
  const second = p * (1 + (gamma * phi) / q) + notP * (1 - (gamma * phi) / notQ);
  return { p, gamma, q, scale, secondMoment: second, mse: (second + dims - 1) / scale ** 2 - 1 };
}

/** PrivUnit2's parameters for p = expit(logit); d >= 2. */
export function sphericalCap(logit: number, epsilon: number, dims: number): CapParameters {
  const a = (dims - 1) / 2;
  const [p, notP, q, notQ] = capOdds(logit, epsilon);
  const gamma = 1 - 2 * betaincinv(a, a, q);
  const logTailMean = a * Math.log1p(-gamma * gamma) - Math.log(dims - 1) - lbeta(0.5, a);
  const scale = Math.exp(logTailMean) * (p / q - notP / notQ);
  return { p, gamma, q, scale, secondMoment: 1, mse: 1 / scale ** 2 - 1 };
}

/** The p minimising the unit-vector MSE: a grid of P_GRID logits on [-2, eps + 12], then a golden-section search
 * between the best one's neighbours (SciPy's bounded Brent in Python: both land within 1e-10 of the minimum; any p
 * is eps-LDP, since q follows from p). */
export function optimalCap(kind: CapKind, epsilon: number, dims: number): CapParameters {
  const family = kind === "gaussian" ? gaussianCap : sphericalCap;
  const mse = (logit: number): number => {
    const v = family(logit, epsilon, dims).mse;
    return Number.isFinite(v) && v > 0 ? v : Infinity;
  };
  const grid = Array.from({ length: P_GRID }, (_, i) => -2 + ((epsilon + 14) * i) / (P_GRID - 1));
  const values = grid.map(mse);
  let best = 0;
  for (let i = 1; i < P_GRID; i++) if (values[i] < values[best]) best = i;
  let lo = grid[Math.max(best - 1, 0)];
  let hi = grid[Math.min(best + 1, P_GRID - 1)];
  const ratio = (Math.sqrt(5) - 1) / 2;
  let c = hi - ratio * (hi - lo);
  let d = lo + ratio * (hi - lo);
  let fc = mse(c);
  let fd = mse(d);
  while (hi - lo > 1e-10) {
    if (fc < fd) {
      hi = d; d = c; fd = fc; c = hi - ratio * (hi - lo); fc = mse(c);
    } else {
      lo = c; c = d; fc = fd; d = lo + ratio * (hi - lo); fd = mse(d);
    }
  }
  const found = (lo + hi) / 2;
  return family(mse(found) <= values[best] ? found : grid[best], epsilon, dims);
}

const caps = new Map<string, CapParameters>();

function cachedCap(kind: CapKind, epsilon: number, dims: number): CapParameters {
  const key = `${kind}/${epsilon}/${dims}`;
  let cap = caps.get(key);
  if (cap === undefined) {
    cap = optimalCap(kind, epsilon, dims);
    caps.set(key, cap);
  }
  return cap;
}

abstract class CapMechanism implements GradientMechanism {
  abstract readonly name: string;
  readonly norm: ClipNorm = "l2";
  readonly cap: CapParameters;

  constructor(readonly dims: number, readonly epsilon: number, kind: CapKind) {
    checkDimsValue(dims);
    checkEpsilon(epsilon);
    this.cap = cachedCap(kind, epsilon, dims);
  }

  protected abstract projection(above: boolean, u: number): number;
  protected abstract assemble(alpha: number, v: Float64Array, rng: Random): Float64Array;

  /** U / m for a unit v (AFT22; module docstring of privunit.py): unbiased for v. */
  privatize(v: Float64Array, rng: Random): Float64Array {
    const above = rng.uniform() < this.cap.p;
    const u = 1 - rng.uniform();
    const out = this.assemble(this.projection(above, u), v, rng);
    for (let j = 0; j < out.length; j++) out[j] /= this.cap.scale;
    return out;
  }

  perturb(x: Float64Array, rng: Random): GradientReport {
    checkVector(x, this.dims, "l2");
    return { value: { dtype: "<f8", values: this.privatize(roundToSphere(x, rng), rng) } };
  }
}

export class PrivUnitG extends CapMechanism {
  readonly name = "privunitg";

  constructor(dims: number, epsilon: number) {
    super(dims, epsilon, "gaussian");
  }

  protected projection(above: boolean, u: number): number {
    const q = this.cap.q;
    return above ? -ndtri(u * q) : ndtri(u * (1 - q));
  }

  protected assemble(alpha: number, v: Float64Array, rng: Random): Float64Array {
    const g = orthogonalPart(normals(rng, v.length), v);
    for (let j = 0; j < g.length; j++) g[j] += alpha * v[j];
    return g;
  }
}

export class PrivUnit2 extends CapMechanism {
  readonly name = "privunit2";

  constructor(dims: number, epsilon: number) {
    if (dims === 1) throw new ModelError("privunit2 needs dims >= 2 (the sphere S^0 has no caps); use privunitg or duchi-l2");
    super(dims, epsilon, "sphere");
  }

  protected projection(above: boolean, u: number): number {
    const a = (this.dims - 1) / 2;
    const q = this.cap.q;
    return above ? 1 - 2 * betaincinv(a, a, u * q) : 2 * betaincinv(a, a, u * (1 - q)) - 1;
  }

  protected assemble(alpha: number, v: Float64Array, rng: Random): Float64Array {
    const w = unit(orthogonalPart(normals(rng, v.length), v));
    const r = Math.sqrt(Math.max(1 - alpha * alpha, 0));
    for (let j = 0; j < w.length; j++) w[j] = alpha * v[j] + r * w[j];
    return w;
  }
}

/** c_d = E|<U, v>| = Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2)) (duchi_l2.py). */
function hemisphereMean(dims: number): number {
  return Math.exp(lgamma(dims / 2) - lgamma((dims + 1) / 2)) / Math.sqrt(Math.PI);
}

export class DuchiL2 implements GradientMechanism {
  readonly name = "duchi-l2";
  readonly norm: ClipNorm = "l2";
  readonly toward: number;
  readonly radius: number;

  constructor(readonly dims: number, readonly epsilon: number) {
    checkDimsValue(dims);
    checkEpsilon(epsilon);
    this.toward = Math.exp(epsilon) / (1 + Math.exp(epsilon));
    this.radius = 1 / (Math.tanh(epsilon / 2) * hemisphereMean(dims));
  }

  perturb(x: Float64Array, rng: Random): GradientReport {
    checkVector(x, this.dims, "l2");
    const v = roundToSphere(x, rng);
    const u = unit(normals(rng, this.dims));
    const toward = rng.uniform() < this.toward;
    let dot = 0;
    for (let j = 0; j < u.length; j++) dot += u[j] * v[j];
    const flip = (dot > 0) === toward ? this.radius : -this.radius;
    for (let j = 0; j < u.length; j++) u[j] *= flip;
    return { value: { dtype: "<f8", values: u } };
  }
}

// ---- ProjUnit (AFNNT23; projunit.py) ----

/** d rounded up to a power of two. */
export function paddedDims(dims: number): number {
  let m = 1;
  while (m < dims) m *= 2;
  return m;
}

/** The orthonormal Sylvester-Hadamard transform H x in place (length a power of two). */
export function hadamard(x: Float64Array): Float64Array {
  const m = x.length;
  for (let h = 1; h < m; h *= 2) {
    for (let i = 0; i < m; i += 2 * h) {
      for (let j = i; j < i + h; j++) {
        const a = x[j];
        const b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const s = 1 / Math.sqrt(m);
  for (let j = 0; j < m; j++) x[j] *= s;
  return x;
}

export class ProjUnit implements GradientMechanism {
  readonly name = "projunit";
  readonly norm: ClipNorm = "l2";
  readonly padded: number;
  readonly k: number;
  readonly inner: PrivUnitG;

  constructor(readonly dims: number, readonly epsilon: number, k?: number) {
    checkDimsValue(dims);
    checkEpsilon(epsilon);
    const requested = k === undefined ? PROJECTED_DIMS : checkDimsValue(k, "k");
    this.padded = paddedDims(dims);
    this.k = Math.min(requested, this.padded);
    this.inner = new PrivUnitG(this.k, epsilon);
  }

  /** D's signs and S's rows for a seed, bit for bit as `ProjUnit.projection` defines them. */
  projection(seed: bigint): { signs: Float64Array; rows: Int32Array } {
    const m = this.padded;
    const signWords = Math.ceil(m / 64);
    const word = (j: number): bigint => mix64((seed + ((BigInt(j + 1) * GAMMA) & MASK64)) & MASK64);
    const signs = new Float64Array(m);
    for (let w = 0; w < signWords; w++) {
      const bits = word(w);
      for (let b = 0; b < 64 && 64 * w + b < m; b++) signs[64 * w + b] = (bits >> BigInt(b)) & 1n ? -1 : 1;
    }
    if (this.k === m) return { signs, rows: Int32Array.from({ length: m }, (_, i) => i) };
    const keys = Array.from({ length: m }, (_, i) => word(signWords + i));
    const order = Array.from({ length: m }, (_, i) => i);
    order.sort((a, b) => (keys[a] < keys[b] ? -1 : keys[a] > keys[b] ? 1 : a - b));
    return { signs, rows: Int32Array.from(order.slice(0, this.k)).sort() };
  }

  perturb(x: Float64Array, rng: Random): GradientReport {
    checkVector(x, this.dims, "l2");
    const seed = rng.word64() >> 1n;
    const v = roundToSphere(x, rng);
    const { signs, rows } = this.projection(seed);
    const y = new Float64Array(this.padded);
    for (let j = 0; j < this.dims; j++) y[j] = v[j] * signs[j];
    hadamard(y);
    const scale = Math.sqrt(this.padded / this.k);
    const projected = Float64Array.from(rows, (i) => y[i] * scale);
    const value = Float32Array.from(this.inner.privatize(unit(projected), rng));
    return { seed: { dtype: "<i8", values: BigInt64Array.of(seed) }, value: { dtype: "<f4", values: value } };
  }
}

// ---- The cube mechanisms (cube.py, ldpstream.mechanisms.multidim) ----

/** k distinct indices of [0, d) in the order a partial Fisher-Yates shuffle draws them (`below(d - i)`, i < k). */
function sampleIndices(rng: Random, d: number, k: number): number[] {
  const pool = Array.from({ length: d }, (_, i) => i);
  const out: number[] = [];
  for (let i = 0; i < k; i++) {
    const j = i + rng.below(d - i);
    [pool[i], pool[j]] = [pool[j], pool[i]];
    out.push(pool[i]);
  }
  return out;
}

/** k = max(1, min(d, floor(eps / 2.5))) (000 Eq. 12). */
export function sampledAttributes(epsilon: number, dims: number): number {
  return Math.max(1, Math.min(dims, Math.floor(epsilon / 2.5)));
}

export class SampledGradient implements GradientMechanism {
  readonly norm: ClipNorm = "linf";
  readonly k: number;
  readonly base: NumericMechanism & { sample(t: number, rng: Random): number };
  readonly scale: number;

  constructor(readonly name: "pm" | "hm", readonly dims: number, readonly epsilon: number, k?: number) {
    checkDimsValue(dims);
    checkEpsilon(epsilon);
    this.k = k === undefined ? sampledAttributes(epsilon, dims) : checkDimsValue(k, "k");
    if (this.k > dims) throw new ModelError(`cannot sample k = ${this.k} of d = ${dims} attributes`);
    this.base = name === "pm" ? new Piecewise(epsilon / this.k) : new Hybrid(epsilon / this.k);
    this.scale = dims / this.k;
  }

  perturb(x: Float64Array, rng: Random): GradientReport {
    checkVector(x, this.dims, "linf");
    const index = sampleIndices(rng, this.dims, this.k);
    const value = Float64Array.from(index, (i) => this.base.sample(x[i], rng) * this.scale);
    return { index: { dtype: "<i8", values: BigInt64Array.from(index, (i) => BigInt(i)) }, value: { dtype: "<f8", values: value } };
  }
}

/** Duchi et al.'s d-dimensional mechanism with 001 Sec. 3.1's fix (multidim.DuchiVector, numeric/duchi.py). */
export class DuchiGradient implements GradientMechanism {
  readonly name = "duchi";
  readonly norm: ClipNorm = "linf";
  readonly bound: number;
  readonly #cdf: Float64Array;

  constructor(readonly dims: number, readonly epsilon: number) {
    checkDimsValue(dims);
    checkEpsilon(epsilon);
    if (dims > MAX_DUCHI_DIMS) throw new ModelError(`duchi takes d <= ${MAX_DUCHI_DIMS}, got d = ${dims}`);
    // binom(d, a) / 2^d by its recurrence (2^-d is a normal double for d <= 1022, subnormal at 1023: still exact).
    const share = new Float64Array(dims + 1);
    share[0] = 2 ** -dims;
    for (let a = 0; a < dims; a++) share[a + 1] = (share[a] * (dims - a)) / (a + 1);
    let positive = 0;
    for (let a = 0; a <= dims; a++) if (2 * a > dims) positive += share[a];
    const e = Math.expm1(epsilon);
    const z = e * positive + 1;
    this.#cdf = new Float64Array(dims + 1);
    let run = 0;
    for (let a = 0; a <= dims; a++) {
      run += (share[a] * (2 * a > dims ? Math.exp(epsilon) : 1)) / z;
      this.#cdf[a] = run;
    }
    const half = (dims - 1) >> 1;
    let central = 2 ** -(dims - 1); // binom(d - 1, (d - 1) // 2) / 2^d, by the same recurrence over d - 1, halved
    for (let a = 0; a < half; a++) central = (central * (dims - 1 - a)) / (a + 1);
    this.bound = z / (e * (central / 2));
  }

  perturb(x: Float64Array, rng: Random): GradientReport {
    checkVector(x, this.dims, "linf");
    const d = this.dims;
    const v = Float64Array.from(x, (t) => (rng.uniform() < (1 + t) / 2 ? 1 : -1));
    const u = rng.uniform() * this.#cdf[d];
    let agreements = 0;
    while (agreements < d && this.#cdf[agreements] <= u) agreements++;
    const agree = new Uint8Array(d);
    for (const i of sampleIndices(rng, d, agreements)) agree[i] = 1;
    const value = Float64Array.from(v, (s, i) => (agree[i] ? s : -s) * this.bound);
    return { value: { dtype: "<f8", values: value } };
  }
}

/** The randomizer `name` for d-dimensional gradients at eps per report (`k`: projunit's projected dimension, pm's
 * and hm's sampled attributes). */
export function gradientMechanism(name: string, dims: number, epsilon: number, params: { k?: number } = {}): GradientMechanism {
  const k = params.k ?? undefined;
  if (k !== undefined && !["projunit", "pm", "hm"].includes(name)) throw new ModelError(`${JSON.stringify(name)} takes no k`);
  switch (name) {
    case "privunitg": return new PrivUnitG(dims, epsilon);
    case "privunit2": return new PrivUnit2(dims, epsilon);
    case "projunit": return new ProjUnit(dims, epsilon, k);
    case "duchi-l2": return new DuchiL2(dims, epsilon);
    case "pm": case "hm": return new SampledGradient(name, dims, epsilon, k);
    case "duchi": return new DuchiGradient(dims, epsilon);
    default: throw new ModelError(`unknown gradient mechanism ${JSON.stringify(name)}; known: ${GRADIENT_MECHANISMS.join(", ")}`);
  }
}
