/**
 * The workload factorization mechanism on the device (`ldpstream.mechanisms.workload.mechanism`): a device of type u
 * reports output o with probability Q[o, u]. The strategy comes from the edge as a NumPy .npz file; the spec pins
 * its content hash (sha256 over the shapes and little-endian float64 bytes of Q, W and epsilon), so the bytes are
 * read only as far as needed to compute that hash, and refused unless it matches. The device then checks Q itself:
 * every column a distribution and every row within e^eps of itself (Prop. 2.2), which is its privacy guarantee.
 * (The aggregator's own check that W lies in Q's row space is a matter of utility, not privacy, and is left to it.)
 */

import {
  checkEpsilon, column, concatBytes, type FreshMechanism, fromUtf8, LDPError, type Random, type Report, sha256Hex, SpecError,
} from "./shared.js";

const LDP_RTOL = 1e-9;
const MAX_MEMBER_BYTES = 256 * 2 ** 20;

interface NpyArray {
  descr: string;
  shape: number[];
  data: Uint8Array;
}

async function inflateRaw(data: Uint8Array, expected: number): Promise<Uint8Array> {
  const Stream = (globalThis as { DecompressionStream?: typeof DecompressionStream }).DecompressionStream;
  if (Stream === undefined) throw new SpecError("this platform has no DecompressionStream to read a strategy");
  const stream = new Blob([data as BlobPart]).stream().pipeThrough(new Stream("deflate-raw" as CompressionFormat));
  const reader = stream.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > expected) {
      await reader.cancel();
      throw new SpecError("a strategy member inflates beyond its declared size");
    }
    parts.push(value);
  }
  return concatBytes(...parts);
}

/** The members of a zip archive (stored or deflated), by name; SpecError for anything else. */
export async function readZip(data: Uint8Array): Promise<Map<string, Uint8Array>> {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const u16 = (at: number) => view.getUint16(at, true);
  const u32 = (at: number) => view.getUint32(at, true);
  let end = -1;
  for (let i = data.length - 22; i >= Math.max(0, data.length - 22 - 65535); i--) {
    if (u32(i) === 0x06054b50) {
      end = i;
      break;
    }
  }
  if (end < 0) throw new SpecError("not a zip archive (no end of central directory)");
  const count = u16(end + 10);
  let at = u32(end + 16);
  const members = new Map<string, Uint8Array>();
  for (let e = 0; e < count; e++) {
    if (at + 46 > data.length || u32(at) !== 0x02014b50) throw new SpecError("a damaged zip central directory");
    const method = u16(at + 10);
    let compressed = u32(at + 20), size = u32(at + 24);
    const nameLength = u16(at + 28), extraLength = u16(at + 30), commentLength = u16(at + 32);
    let offset = u32(at + 42);
    const name = fromUtf8(data.subarray(at + 46, at + 46 + nameLength));
    let x = at + 46 + nameLength;
    const extraEnd = x + extraLength;
    while (x + 4 <= extraEnd) { // zip64: the fields that are 0xFFFFFFFF, in order
      const id = u16(x), length = u16(x + 2);
      if (id === 1) {
        let y = x + 4;
        const big = () => {
          const v = Number(view.getBigUint64(y, true));
          y += 8;
          return v;
        };
        if (size === 0xffffffff) size = big();
        if (compressed === 0xffffffff) compressed = big();
        if (offset === 0xffffffff) offset = big();
      }
      x += 4 + length;
    }
    at = extraEnd + commentLength;
    if (size > MAX_MEMBER_BYTES || offset + 30 > data.length || u32(offset) !== 0x04034b50) {
      throw new SpecError("a damaged or oversized zip member");
    }
    const start = offset + 30 + u16(offset + 26) + u16(offset + 28);
    if (start + compressed > data.length) throw new SpecError("a zip member runs past the archive");
    const raw = data.subarray(start, start + compressed);
    let body: Uint8Array;
    if (method === 0) body = raw;
    else if (method === 8) body = await inflateRaw(raw, size);
    else throw new SpecError(`zip compression method ${method} is not supported`);
    if (body.length !== size) throw new SpecError("a zip member's size is not the declared one");
    members.set(name, body);
  }
  return members;
}

/** One .npy array (format 1-3, C order); SpecError for anything else. */
export function readNpy(data: Uint8Array): NpyArray {
  const magic = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59];
  if (data.length < 10 || !magic.every((b, i) => data[i] === b)) throw new SpecError("not a .npy array");
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const major = data[6];
  const headerLength = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const headerStart = major === 1 ? 10 : 12;
  if (headerStart + headerLength > data.length) throw new SpecError("a .npy header runs past its file");
  const header = fromUtf8(data.subarray(headerStart, headerStart + headerLength));
  const descr = /'descr':\s*'([<>|][A-Za-z][0-9]+)'/.exec(header);
  const fortran = /'fortran_order':\s*(True|False)/.exec(header);
  const shape = /'shape':\s*\(([0-9,\s]*)\)/.exec(header);
  if (descr === null || fortran === null || shape === null || fortran[1] !== "False") {
    throw new SpecError("a .npy header this SDK does not read (C order arrays only)");
  }
  const dims = shape[1].split(",").map((s) => s.trim()).filter((s) => s.length).map(Number);
  return { descr: descr[1], shape: dims, data: data.subarray(headerStart + headerLength) };
}

function float64s(array: NpyArray, what: string): Float64Array {
  if (array.descr !== "<f8") throw new SpecError(`the strategy's ${what} is ${array.descr}, not <f8`);
  const count = array.shape.reduce((a, b) => a * b, 1);
  if (array.data.length !== 8 * count) throw new SpecError(`the strategy's ${what} has ${array.data.length} bytes`);
  return new Float64Array(array.data.slice().buffer);
}

function shapeBytes(shape: number[]): Uint8Array {
  const out = new Uint8Array(8 * shape.length);
  const view = new DataView(out.buffer);
  shape.forEach((d, i) => view.setBigInt64(8 * i, BigInt(d), true));
  return out;
}

export class FactorizationMechanism implements FreshMechanism<number> {
  readonly name = "factorization";
  readonly epsilon: number;
  readonly outputs: number;
  readonly types: number;
  readonly hash: string;
  /** cdf[u][o]: P[output <= o | type u], the last output of positive probability set to 1. */
  private readonly cdf: Float64Array[];
  private readonly labels: Float64Array | null;

  /** This strategy as the mechanism of attribute `name` of `types` values at eps per report; LDPError naming the
   * attribute unless it is a strategy for that eps and that many types (the collector's check). */
  forAttribute(name: string, types: number, eps: number): this {
    if (!(Math.abs(this.epsilon - eps) <= 1e-12 * Math.abs(eps))) {
      throw new LDPError(`attribute '${name}': its strategy is for eps ${this.epsilon}, not ${eps}`);
    }
    if (this.types !== types) throw new LDPError(`attribute '${name}': its strategy has ${this.types} types, not ${types}`);
    return this;
  }

  private constructor(q: Float64Array, outputs: number, types: number, epsilon: number, hash: string,
                      labels: Float64Array | null) {
    this.epsilon = checkEpsilon(epsilon);
    this.outputs = outputs;
    this.types = types;
    this.hash = hash;
    this.labels = labels;
    checkStrategy(q, outputs, types, this.epsilon);
    this.cdf = [];
    for (let u = 0; u < types; u++) {
      const c = new Float64Array(outputs);
      let sum = 0, last = 0;
      for (let o = 0; o < outputs; o++) {
        sum += q[o * types + u];
        c[o] = sum;
        if (q[o * types + u] > 0) last = o;
      }
      for (let o = last; o < outputs; o++) c[o] = 1.0;
      this.cdf.push(c);
    }
  }

  /** The strategy in .npz bytes if its content hash is `expectedHash` (and its stored one); SpecError otherwise. */
  static async fromNpz(data: Uint8Array, expectedHash: string): Promise<FactorizationMechanism> {
    try {
      return await FactorizationMechanism.read(data, expectedHash);
    } catch (exc) {
      throw exc instanceof SpecError ? exc : new SpecError(`not a factorization strategy: ${String(exc)}`);
    }
  }

  private static async read(data: Uint8Array, expectedHash: string): Promise<FactorizationMechanism> {
    const members = await readZip(data);
    const get = (name: string) => {
      const m = members.get(`${name}.npy`);
      if (m === undefined) throw new SpecError(`the strategy has no ${name}`);
      return readNpy(m);
    };
    const q = get("q"), w = get("w"), eps = get("epsilon"), stored = get("hash"), labels = get("labels");
    if (q.shape.length !== 2 || w.shape.length !== 2 || eps.shape.length !== 0) {
      throw new SpecError("a strategy's q and w are matrices and its epsilon a number");
    }
    const qValues = float64s(q, "q"), wValues = float64s(w, "w"), epsilon = float64s(eps, "epsilon")[0];
    const digest = sha256Hex(concatBytes(shapeBytes(q.shape), q.data, shapeBytes(w.shape), w.data, shapeBytes([1]),
                                         eps.data));
    if (digest !== expectedHash) throw new SpecError(`the strategy does not match its pinned hash ${expectedHash.slice(0, 12)}...`);
    if (/^<U[0-9]+$/.test(stored.descr)) {
      const points = stored.data.length % 4 === 0 ? [...new Uint32Array(stored.data.slice().buffer)].filter((c) => c !== 0) : [];
      const text = points.every((c) => c < 128) ? String.fromCharCode(...points) : "";
      if (text !== digest) throw new SpecError("the strategy does not match its stored hash");
    }
    if (w.shape[1] !== q.shape[1] || !wValues.every(Number.isFinite)) {
      throw new SpecError(`the workload must be a finite p x ${q.shape[1]} matrix`);
    }
    let labelValues: Float64Array | null = null;
    if (labels.shape.reduce((a, b) => a * b, 1) > 0) {
      labelValues = float64s(labels, "labels");
      if (labelValues.length !== q.shape[1]) throw new SpecError("the strategy's labels are not one per type");
    }
    try {
      return new FactorizationMechanism(qValues, q.shape[0], q.shape[1], epsilon, digest, labelValues);
    } catch (exc) {
      throw exc instanceof LDPError ? new SpecError(`not a valid strategy: ${exc.message}`) : exc;
    }
  }

  perturb(code: number, rng: Random): Report {
    const type = this.labels === null ? code : this.labels.indexOf(code);
    if (!Number.isInteger(type) || type < 0 || type >= this.types) {
      throw new LDPError(`values must lie in [0, ${this.types})`);
    }
    const u = rng.uniform();
    const cdf = this.cdf[type];
    let lo = 0, hi = this.outputs - 1; // the first output whose cumulative probability exceeds u
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid] > u) hi = mid;
      else lo = mid + 1;
    }
    return { output: column("<i8", lo) };
  }
}

/** Q's columns are distributions (within 1e-9) and each used row within e^eps of itself (Prop. 2.2). */
function checkStrategy(q: Float64Array, outputs: number, types: number, epsilon: number): void {
  if (outputs < 1 || types < 1) throw new LDPError("a strategy matrix must be outputs x types");
  for (const x of q) {
    if (!Number.isFinite(x)) throw new LDPError("the strategy matrix has non-finite entries");
    if (x < 0) throw new LDPError("the strategy matrix has negative probabilities");
  }
  for (let u = 0; u < types; u++) {
    let sum = 0;
    for (let o = 0; o < outputs; o++) sum += q[o * types + u];
    if (!(Math.abs(sum - 1.0) <= 1e-9)) throw new LDPError(`column ${u} of the strategy matrix sums to ${sum}, not 1`);
  }
  const bound = Math.exp(epsilon);
  for (let o = 0; o < outputs; o++) {
    let hi = -Infinity, lo = Infinity;
    for (let u = 0; u < types; u++) {
      hi = Math.max(hi, q[o * types + u]);
      lo = Math.min(lo, q[o * types + u]);
    }
    if (hi > 0 && hi > bound * lo * (1.0 + LDP_RTOL)) throw new LDPError(`strategy row ${o} violates ${epsilon}-LDP`);
  }
}
