/**
 * The models a device trains, in plain typed arrays (`ldpstream.contract.networks`): a fully connected network with layer
 * widths dims = (d, h_1, ..., h_m, C), ReLU between layers and a softmax output trained by cross-entropy; softmax
 * regression is the network with no hidden layer (dims = (d, C)). The parameters are one flat Float64Array theta:
 * per layer l, W_l (in_l x out_l, row-major) then b_l (out_l), in order, exactly as the Python snapshot encodes them
 * (`ldpstream.contract.snapshot`, decoded by `decodeSnapshot` here).
 *
 * With a_0 = x, z_l = a_{l-1} W_l + b_l, a_l = relu(z_l) and p = softmax(z_L): delta_L = p - onehot(y),
 * delta_{l-1} = (delta_l W_l^T) * [z_{l-1} > 0], and the example's gradient is dW_l = a_{l-1} delta_l^T,
 * db_l = delta_l. A device's update is the mean of its examples' gradients (summed in row order), scaled to L2 norm
 * <= C and divided by C (docs/reference/protocol.md section 13.5, `ldpstream.contract.training.clipped_update_vector`).
 * Pure: no I/O, no randomness, nothing from the device or the collector.
 */

export const MAX_LAYERS = 8;
export const MAX_WIDTH = 1 << 20;
export const MAX_PARAMS = 1 << 26;
export const NETWORKS = ["softmax", "mlp"] as const;
export type NetworkName = (typeof NETWORKS)[number];

/** One of the device's own examples: its d features and its class 0..C-1. */
export interface Example {
  features: ArrayLike<number>;
  label: number;
}

export class ModelError extends Error {
  override name = "ModelError";
}

/** The parameter count of `dims`: sum of in*out + out over layers. */
export function parameterCount(dims: readonly number[]): number {
  let size = 0;
  for (let l = 0; l + 1 < dims.length; l++) size += dims[l] * dims[l + 1] + dims[l + 1];
  return size;
}

/** ModelError unless `dims` is a valid architecture for network `name` (bounded before anything is allocated). */
export function checkDims(name: string, dims: readonly number[]): void {
  if (!(NETWORKS as readonly string[]).includes(name)) throw new ModelError(`unknown network ${JSON.stringify(name)}; known: softmax, mlp`);
  const layers = dims.length - 1;
  if (!(name === "softmax" ? layers === 1 : layers >= 2 && layers <= MAX_LAYERS)) {
    throw new ModelError(`${name} takes ${name === "softmax" ? "2 widths (d, C)" : "3 to 9 widths"}, got ${JSON.stringify(dims)}`);
  }
  if (dims.some((k) => !Number.isInteger(k) || k < 1 || k > MAX_WIDTH) || dims[dims.length - 1] < 2) {
    throw new ModelError(`widths must lie in 1..${MAX_WIDTH} with at least 2 classes, got ${JSON.stringify(dims)}`);
  }
  if (parameterCount(dims) > MAX_PARAMS) throw new ModelError(`${name} ${JSON.stringify(dims)} has more than ${MAX_PARAMS} parameters`);
}

/** A fully connected ReLU network with a softmax output (module docstring). */
export class Network {
  readonly dims: readonly number[];
  readonly size: number;
  /** Per layer, where W_l and b_l start in theta. */
  readonly offsets: readonly [number, number][];
  readonly #scratch: { pre: Float64Array[]; act: Float64Array[]; delta: Float64Array[] };

  constructor(readonly name: NetworkName, dims: readonly number[]) {
    checkDims(name, dims);
    this.dims = [...dims];
    this.size = parameterCount(dims);
    const offsets: [number, number][] = [];
    let at = 0;
    for (let l = 0; l + 1 < dims.length; l++) {
      offsets.push([at, at + dims[l] * dims[l + 1]]);
      at += dims[l] * dims[l + 1] + dims[l + 1];
    }
    this.offsets = offsets;
    const widths = dims.slice(1);
    this.#scratch = {
      pre: widths.map((w) => new Float64Array(w)), act: widths.map((w) => new Float64Array(w)),
      delta: widths.map((w) => new Float64Array(w)),
    };
  }

  get features(): number {
    return this.dims[0];
  }

  get classes(): number {
    return this.dims[this.dims.length - 1];
  }

  #checkTheta(theta: Float64Array): void {
    if (theta.length !== this.size) throw new ModelError(`${this.name} ${JSON.stringify(this.dims)} has ${this.size} parameters, got ${theta.length}`);
  }

  #checkExample(x: ArrayLike<number>, y?: number): void {
    if (x.length !== this.features) throw new ModelError(`an example has ${this.features} features, got ${x.length}`);
    if (y !== undefined && !(Number.isInteger(y) && y >= 0 && y < this.classes)) {
      throw new ModelError(`labels must lie in 0..${this.classes - 1}, got ${String(y)}`);
    }
  }

  /** The forward pass of one example into the scratch arrays; returns the logits z_L (a view: copy to keep). */
  #forward(theta: Float64Array, x: ArrayLike<number>): Float64Array {
    const { pre, act } = this.#scratch;
    let input: ArrayLike<number> = x;
    const last = this.offsets.length - 1;
    for (let l = 0; l <= last; l++) {
      const [w, b] = this.offsets[l];
      const fanIn = this.dims[l];
      const fanOut = this.dims[l + 1];
      const z = pre[l];
      for (let o = 0; o < fanOut; o++) z[o] = theta[b + o];
      for (let i = 0; i < fanIn; i++) {
        const a = input[i];
        if (a === 0) continue;
        const row = w + i * fanOut;
        for (let o = 0; o < fanOut; o++) z[o] += a * theta[row + o];
      }
      if (l < last) {
        const out = act[l];
        for (let o = 0; o < fanOut; o++) out[o] = z[o] > 0 ? z[o] : 0;
        input = out;
      }
    }
    return pre[last];
  }

  /** z_L of one example (C numbers). */
  logits(theta: Float64Array, x: ArrayLike<number>): Float64Array {
    this.#checkTheta(theta);
    this.#checkExample(x);
    return Float64Array.from(this.#forward(theta, x));
  }

  /** The cross-entropy -log softmax(z_L)_y of one example. */
  loss(theta: Float64Array, x: ArrayLike<number>, y: number): number {
    this.#checkTheta(theta);
    this.#checkExample(x, y);
    const z = this.#forward(theta, x);
    return logSumExp(z) - z[y];
  }

  /** The most likely class of one example. */
  predict(theta: Float64Array, x: ArrayLike<number>): number {
    const z = this.logits(theta, x);
    let best = 0;
    for (let c = 1; c < z.length; c++) if (z[c] > z[best]) best = c;
    return best;
  }

  /** Adds the gradient of one example's cross-entropy in theta to `out` (module docstring). */
  addGradient(theta: Float64Array, x: ArrayLike<number>, y: number, out: Float64Array): void {
    this.#checkTheta(theta);
    this.#checkExample(x, y);
    if (out.length !== this.size) throw new ModelError(`the gradient has ${this.size} entries, got ${out.length}`);
    const z = this.#forward(theta, x);
    const { pre, act, delta } = this.#scratch;
    const last = this.offsets.length - 1;
    const top = delta[last];
    const lse = logSumExp(z);
    for (let c = 0; c < z.length; c++) top[c] = Math.exp(z[c] - lse);
    top[y] -= 1;
    for (let l = last; l >= 0; l--) {
      const [w, b] = this.offsets[l];
      const fanIn = this.dims[l];
      const fanOut = this.dims[l + 1];
      const dl = delta[l];
      const input: ArrayLike<number> = l === 0 ? x : act[l - 1];
      for (let i = 0; i < fanIn; i++) {
        const a = input[i];
        if (a === 0) continue;
        const row = w + i * fanOut;
        for (let o = 0; o < fanOut; o++) out[row + o] += a * dl[o];
      }
      for (let o = 0; o < fanOut; o++) out[b + o] += dl[o];
      if (l > 0) {
        const below = delta[l - 1];
        const zBelow = pre[l - 1];
        for (let i = 0; i < fanIn; i++) {
          if (!(zBelow[i] > 0)) {
            below[i] = 0;
            continue;
          }
          const row = w + i * fanOut;
          let s = 0;
          for (let o = 0; o < fanOut; o++) s += theta[row + o] * dl[o];
          below[i] = s;
        }
      }
    }
  }

  /** The mean of the examples' gradients (what a device holding these examples contributes before clipping). */
  meanGradient(theta: Float64Array, examples: readonly Example[]): Float64Array {
    if (examples.length === 0) throw new ModelError("a device trains on at least one example");
    const out = new Float64Array(this.size);
    for (const e of examples) this.addGradient(theta, e.features, e.label, out);
    if (examples.length > 1) for (let j = 0; j < out.length; j++) out[j] /= examples.length;
    return out;
  }
}

function logSumExp(z: Float64Array): number {
  let top = -Infinity;
  for (let c = 0; c < z.length; c++) if (z[c] > top) top = z[c];
  let s = 0;
  for (let c = 0; c < z.length; c++) s += Math.exp(z[c] - top);
  return top + Math.log(s);
}

/** Protocol 9.5 step 2, in place: g scaled to L2 norm <= c, then divided by c (a vector of the unit ball). */
export function clipToUnit(g: Float64Array, c: number): Float64Array {
  if (!(Number.isFinite(c) && c > 0)) throw new ModelError(`the clip must be finite and > 0, got ${c}`);
  let s = 0;
  for (let j = 0; j < g.length; j++) s += g[j] * g[j];
  const norm = Math.sqrt(s);
  const factor = norm > c ? c / norm : 1;
  for (let j = 0; j < g.length; j++) g[j] = (g[j] * factor) / c;
  return g;
}

// ---- Snapshots: a model version as bytes (`ldpstream.contract.snapshot`) ----

const MAGIC = [0x4c, 0x44, 0x50, 0x4d]; // "LDPM"
const FORMAT_VERSION = 1;
const MAX_NAME = 32;

/** A decoded model version: network `name`, widths `dims`, version number and its parameters (float64). */
export interface Snapshot {
  name: NetworkName;
  dims: number[];
  version: bigint;
  params: Float64Array;
}

/** What a device expects a model to be (the job's spec): a snapshot of another shape is refused before allocation. */
export interface ModelShape {
  name: string;
  dims: readonly number[];
}

/** The model version these outside bytes encode (`ldpstream.contract.snapshot` layout), or ModelError. The header, the
 * architecture and every length are checked (against `expected` when given) before the parameters are read;
 * parameters must be finite. */
export function decodeSnapshot(data: Uint8Array, expected?: ModelShape): Snapshot {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let at = 0;
  const take = (n: number, what: string): number => {
    if (n > data.length - at) throw new ModelError(`snapshot cut short in its ${what} (${data.length} bytes)`);
    at += n;
    return at - n;
  };
  take(4, "magic");
  if (MAGIC.some((b, i) => data[i] !== b)) throw new ModelError("bad magic: not a model snapshot");
  const h = take(3, "header");
  const [fmt, size, nameLen] = [data[h], data[h + 1], data[h + 2]];
  if (fmt !== FORMAT_VERSION) throw new ModelError(`unknown snapshot format ${fmt}`);
  if (size !== 4 && size !== 8) throw new ModelError(`unknown parameter dtype size ${size}`);
  if (nameLen < 1 || nameLen > MAX_NAME) throw new ModelError(`architecture name length ${nameLen} out of range`);
  const n = take(nameLen, "architecture");
  const name = String.fromCharCode(...data.subarray(n, n + nameLen));
  if (!(NETWORKS as readonly string[]).includes(name)) throw new ModelError(`unknown architecture ${JSON.stringify(name)}`);
  const m = data[take(1, "widths")];
  const w = take(4 * m, "widths");
  const dims = Array.from({ length: m }, (_, i) => view.getUint32(w + 4 * i, true));
  checkDims(name, dims);
  if (expected !== undefined && (expected.name !== name || expected.dims.length !== dims.length
      || expected.dims.some((k, i) => k !== dims[i]))) {
    throw new ModelError(`the job trains ${expected.name} ${JSON.stringify(expected.dims)}, the model is ${name} ${JSON.stringify(dims)}`);
  }
  const v = take(16, "version");
  const version = view.getBigUint64(v, true);
  const count = view.getBigUint64(v + 8, true);
  const want = parameterCount(dims);
  if (count !== BigInt(want)) throw new ModelError(`${name} ${JSON.stringify(dims)} has ${want} parameters, the snapshot says ${count}`);
  if (data.length - at !== want * size) throw new ModelError(`expected ${want * size} parameter bytes, got ${data.length - at}`);
  const params = new Float64Array(want);
  for (let j = 0; j < want; j++) {
    const x = size === 8 ? view.getFloat64(at + 8 * j, true) : view.getFloat32(at + 4 * j, true);
    if (!Number.isFinite(x)) throw new ModelError("parameters must be finite");
    params[j] = x;
  }
  return { name: name as NetworkName, dims, version, params };
}
