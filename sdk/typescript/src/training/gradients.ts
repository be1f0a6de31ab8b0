/**
 * The update randomizers on the device (docs/reference/protocol.md section 13.5; Python
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
import { ModelError } from "./model.js";
import { ndtri } from "./special.js";

/** One device's report columns: `value` float32 (n), and projunit's `seed` (uint64). */
export interface UpdateReport {
  seed?: bigint;
  value: Float32Array;
}

/** The job's mechanism as its spec states it (protocol 13.1). */
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

/** (hi, lo) of the low 64 bits of a * b for uint32 a and 64-bit b = (bh, bl). */
function mul64(a: number, bh: number, bl: number): [number, number] {
  const a0 = a & 0xffff, a1 = a >>> 16, b0 = bl & 0xffff, b1 = bl >>> 16;
  const p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  const mid = (p00 >>> 16) + (p01 & 0xffff) + (p10 & 0xffff);
  const lo = ((mid << 16) | (p00 & 0xffff)) >>> 0;
  const hi = (p11 + (p01 >>> 16) + (p10 >>> 16) + (mid >>> 16) + Math.imul(a, bh)) >>> 0;
  return [hi, lo];
}

/** (hi, lo) * (ch, cl) mod 2^64. */
function mulConst(hi: number, lo: number, ch: number, cl: number): [number, number] {
  const [h, l] = mul64(lo, ch, cl);
  return [(h + Math.imul(hi, cl)) >>> 0, l];
}

const MIX1 = [0xbf58476d, 0x1ce4e5b9] as const;
const MIX2 = [0x94d049bb, 0x133111eb] as const;
const GOLDEN = [0x9e3779b9, 0x7f4a7c15] as const;

/** SplitMix64's outputs mix64(s + (j + 1) golden), j < count, as (hi, lo) words: `u64.mix64` on 32-bit halves (no
 * BigInt in the loop: ProjUnit reads one word per padded coordinate). */
export function seedWords(seed: bigint, count: number): { hi: Uint32Array; lo: Uint32Array } {
  const hi = new Uint32Array(count);
  const lo = new Uint32Array(count);
  let sh = Number((seed >> 32n) & 0xffffffffn);
  let sl = Number(seed & 0xffffffffn);
  for (let j = 0; j < count; j++) {
    const l = (sl + GOLDEN[1]) >>> 0; // the state advances by golden: s + (j + 1) golden mod 2^64
    sh = (sh + GOLDEN[0] + (l < sl ? 1 : 0)) >>> 0;
    sl = l;
    // z ^= z >> 30; z *= MIX1; z ^= z >> 27; z *= MIX2; z ^= z >> 31
    let zh = sh, zl = (sl ^ ((sl >>> 30) | (sh << 2))) >>> 0;
    zh = (zh ^ (sh >>> 30)) >>> 0;
    [zh, zl] = mulConst(zh, zl, MIX1[0], MIX1[1]);
    zl = (zl ^ ((zl >>> 27) | (zh << 5))) >>> 0;
    zh = (zh ^ (zh >>> 27)) >>> 0;
    [zh, zl] = mulConst(zh, zl, MIX2[0], MIX2[1]);
    zl = (zl ^ ((zl >>> 31) | (zh << 1))) >>> 0;
    zh = (zh ^ (zh >>> 31)) >>> 0;
    hi[j] = zh;
    lo[j] = zl;
  }
  return { hi, lo };
}

/** D's signs and S's rows of W = sqrt(n'/k) S H D for a seed, bit for bit as `ProjUnit.projection` defines them:
 * w_j = mix64(s + (j + 1) golden); D_j = -1 iff bit j mod 64 of w_{j // 64} is set; S lists in increasing order the
 * k indices i < n' with the smallest w_{ceil(n'/64) + i} (ties: the lower index), all of them when k = n'. */
export function projection(seed: bigint, padded: number, k: number): { signs: Float64Array; rows: Int32Array } {
  const signWords = Math.ceil(padded / 64);
  const words = seedWords(seed, signWords + (k === padded ? 0 : padded));
  const signs = new Float64Array(padded);
  for (let j = 0; j < padded; j++) {
    const w = j >> 6, b = j & 63;
    const bit = b < 32 ? (words.lo[w] >>> b) & 1 : (words.hi[w] >>> (b - 32)) & 1;
    signs[j] = bit ? -1 : 1;
  }
  if (k === padded) return { signs, rows: Int32Array.from({ length: padded }, (_, i) => i) };
  // The k smallest keys: by their value rounded to a double (monotone), then the ties at the threshold exactly.
  const keys = new Float64Array(padded);
  for (let i = 0; i < padded; i++) keys[i] = words.hi[signWords + i] * 4294967296 + words.lo[signWords + i];
  const threshold = Float64Array.from(keys).sort()[k - 1];
  const rows: number[] = [];
  const ties: number[] = [];
  for (let i = 0; i < padded; i++) {
    if (keys[i] < threshold) rows.push(i);
    else if (keys[i] === threshold) ties.push(i);
  }
  const exact = (i: number) => [words.hi[signWords + i], words.lo[signWords + i]];
  ties.sort((a, b) => {
    const [ah, al] = exact(a), [bh, bl] = exact(b);
    return ah !== bh ? ah - bh : al !== bl ? al - bl : a - b;
  });
  rows.push(...ties.slice(0, k - rows.length));
  return { signs, rows: Int32Array.from(rows).sort() };
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
