/**
 * The update randomizers on the device (docs/reference/protocol.md section 9.5; Python
 * `ldpstream.mechanisms.gradients.device`): PrivUnitG (Asi, Feldman and Talwar, ICML 2022, "AFT22") and ProjUnit
 * (Asi, Feldman, Nelson, Nguyen and Talwar, NeurIPS 2023, "AFNNT23") on ONE device's clipped vector x (||x|| <= 1),
 * with the cap parameters (p, q) of the job's spec. Every random choice is read from the SDK's `Random` in the
 * protocol's order: the sign of the rounding to the sphere (u0), the cap (u1), the projection alpha by inversion
 * (u2), then n standard normals by Box-Muller in pairs; projunit draws its seed (`word64() >> 1`) first. A scripted
 * source therefore gives the Python device's report (tests/vectors/training.json pins both).
 *
 * Privacy and unbiasedness are the server mechanisms' (`ldpstream.mechanisms.gradients.privunit`, `.projunit`
 * derive them): Box-Muller and inversion are exact transforms of uniforms; p (1 - q) / ((1 - p) q) <= e^eps is the
 * privacy condition, which the device's policy checks on the spec before it trains (`capRatio`).
 * Pure: no I/O, nothing from the device or the collector.
 */

import type { Random } from "../random.js";
import { GAMMA, MASK64, mix64 } from "../u64.js";
import { ModelError } from "./model.js";
import { ndtri } from "./special.js";

/** One device's report columns: `value` float32 (n), and projunit's `seed` (uint64). */
export interface UpdateReport {
  seed?: bigint;
  value: Float32Array;
}

/** The job's mechanism as its spec states it (protocol 9.1). */
export interface MechanismSpec {
  name: string;
  p: number;
  q: number;
  k?: number;
}

const L2_SLACK = 1e-9;

/** p (1 - q) / ((1 - p) q): the largest density ratio of a cap mechanism with these parameters (at most e^eps). */
export function capRatio(p: number, q: number): number {
  if (!(p > 0 && p < 1 && q > 0 && q < 1)) throw new ModelError(`cap parameters must lie in (0, 1), got p=${p}, q=${q}`);
  return (p * (1 - q)) / ((1 - p) * q);
}

/** (gamma, m): the cap's threshold -ndtri(q) and the unbiasing scale phi(gamma) (p/q - (1-p)/(1-q)) (AFT22). */
export function capScale(p: number, q: number): [number, number] {
  const gamma = -ndtri(q);
  const phi = Math.exp((-gamma * gamma) / 2) / Math.sqrt(2 * Math.PI);
  return [gamma, phi * (p / q - (1 - p) / (1 - q))];
}

/** n standard normals by Box-Muller from 2 ceil(n/2) uniforms (a, b): sqrt(-2 ln(1-a)) (cos 2 pi b, sin 2 pi b). */
export function gaussians(rng: Random, n: number): Float64Array {
  const z = new Float64Array(n);
  for (let j = 0; j < n; j += 2) {
    const a = rng.uniform();
    const b = rng.uniform();
    const rho = Math.sqrt(-2 * Math.log(1 - a));
    const angle = 2 * Math.PI * b;
    z[j] = rho * Math.cos(angle);
    if (j + 1 < n) z[j + 1] = rho * Math.sin(angle);
  }
  return z;
}

function dot(a: Float64Array, b: Float64Array): number {
  let s = 0;
  for (let j = 0; j < a.length; j++) s += a[j] * b[j];
  return s;
}

/** Step 1: a unit v with E[v] = x: +-x/||x|| with P[+] = (1 + ||x||)/2 (+-e_0 for x = 0), from the uniform u0. */
export function roundToSphere(x: Float64Array, u0: number): Float64Array {
  const r = Math.sqrt(dot(x, x));
  if (!(r <= 1 + L2_SLACK)) throw new ModelError(`the vector must be finite and clipped to norm 1, has norm ${r}`);
  const v = new Float64Array(x.length);
  if (r > 0) for (let j = 0; j < x.length; j++) v[j] = x[j] / r;
  else v[0] = 1;
  if (!(u0 < (1 + Math.min(r, 1)) / 2)) for (let j = 0; j < v.length; j++) v[j] = -v[j];
  return v;
}

/** Steps 2-5: the float32 PrivUnitG report U / m for the unit vector v. */
export function privunitFromUnit(v: Float64Array, p: number, q: number, rng: Random): Float32Array {
  const [, m] = capScale(p, q);
  const u1 = rng.uniform();
  const u2 = rng.uniform();
  const w = 1 - u2;
  const alpha = u1 < p ? -ndtri(w * q) : ndtri(w * (1 - q));
  const z = gaussians(rng, v.length);
  const along = dot(z, v);
  const out = new Float32Array(v.length);
  for (let j = 0; j < v.length; j++) out[j] = (z[j] - along * v[j] + alpha * v[j]) / m;
  return out;
}

/** The device's privunitg report of the clipped vector x. */
export function privunitgReport(x: Float64Array, p: number, q: number, rng: Random): UpdateReport {
  const v = roundToSphere(x, rng.uniform());
  return { value: privunitFromUnit(v, p, q, rng) };
}

/** d rounded up to a power of two (the Hadamard transform's length). */
export function paddedDims(dims: number): number {
  let m = 1;
  while (m < dims) m *= 2;
  return m;
}

/** The orthonormal Sylvester-Hadamard transform H x in place (length a power of two; H is symmetric). */
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

/** D's signs and S's rows of W = sqrt(n'/k) S H D for a seed, bit for bit as `ProjUnit.projection` defines them:
 * w_j = mix64(s + (j + 1) golden); D_j = -1 iff bit j mod 64 of w_{j // 64} is set; S lists in increasing order the
 * k indices i < n' with the smallest w_{ceil(n'/64) + i} (ties: the lower index), all of them when k = n'. */
export function projection(seed: bigint, padded: number, k: number): { signs: Float64Array; rows: Int32Array } {
  const signWords = Math.ceil(padded / 64);
  const word = (j: number): bigint => mix64((seed + BigInt(j + 1) * GAMMA) & MASK64);
  const signs = new Float64Array(padded);
  for (let w = 0; w < signWords; w++) {
    const bits = word(w);
    for (let b = 0; b < 64 && 64 * w + b < padded; b++) signs[64 * w + b] = (bits >> BigInt(b)) & 1n ? -1 : 1;
  }
  if (k === padded) return { signs, rows: Int32Array.from({ length: padded }, (_, i) => i) };
  const keys = Array.from({ length: padded }, (_, i) => word(signWords + i));
  const order = Array.from({ length: padded }, (_, i) => i);
  order.sort((a, b) => (keys[a] < keys[b] ? -1 : keys[a] > keys[b] ? 1 : a - b));
  return { signs, rows: Int32Array.from(order.slice(0, k)).sort() };
}

/** The device's projunit report of the clipped vector x (k the spec's, capped at the padded dimension). */
export function projunitReport(x: Float64Array, k: number, p: number, q: number, rng: Random): UpdateReport {
  const padded = paddedDims(x.length);
  const kk = Math.min(k, padded);
  const seed = rng.word64() >> 1n;
  const v = roundToSphere(x, rng.uniform());
  const { signs, rows } = projection(seed, padded, kk);
  const y = new Float64Array(padded);
  for (let j = 0; j < x.length; j++) y[j] = v[j] * signs[j];
  hadamard(y);
  const scale = Math.sqrt(padded / kk);
  const w = Float64Array.from(rows, (i) => y[i] * scale);
  const norm = Math.sqrt(dot(w, w));
  if (norm > 0) for (let j = 0; j < w.length; j++) w[j] /= norm;
  else w[0] = 1;
  return { seed, value: privunitFromUnit(w, p, q, rng) };
}

/** The report of the job's mechanism for the clipped vector x. */
export function perturbUpdate(x: Float64Array, mechanism: MechanismSpec, rng: Random): UpdateReport {
  if (mechanism.name === "privunitg") return privunitgReport(x, mechanism.p, mechanism.q, rng);
  if (mechanism.name === "projunit" && mechanism.k !== undefined) return projunitReport(x, mechanism.k, mechanism.p, mechanism.q, rng);
  throw new ModelError(`unknown update mechanism ${JSON.stringify(mechanism.name)}; devices run privunitg and projunit`);
}
