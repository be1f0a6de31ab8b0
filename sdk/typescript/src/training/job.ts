/**
 * What a device reads and writes for a training job (docs/reference/protocol.md section 13; Python
 * `ldpstream.contract.training`): the job spec (`parseJob`), the model descriptor (`parseDescriptor`), and the
 * update's msgpack bytes (`encodeUpdate`), which `computeUpdate` makes from the device's own examples: the mean
 * gradient at the model version, clipped, perturbed with the job's mechanism. Every parser reads outside bytes
 * (already signature-checked by the caller) and returns or throws `JobError` with the protocol's code.
 * Pure: no I/O; nothing from the device or the collector.
 */

import { isWholeLiteral } from "../pointer.js";
import type { Random } from "../random.js";
import { Writer } from "../wire.js";
import { perturbUpdate, type MechanismSpec, type UpdateReport } from "./gradients.js";
import { checkDims, clipToUnit, type Example, ModelError, Network, type NetworkName, parameterCount } from "./model.js";

export const JOB_PREFIX = "job/";
export const MAX_JOB_SPEC_BYTES = 64 * 1024;
export const MAX_DESCRIPTOR_BYTES = 4096;
export const MAX_MODEL_BYTES = 64 * 1024 * 1024;
export const MAX_UPDATE_BYTES = 64 * 1024 + 256;
export const UPDATE_WIRE_VERSION = 1;
const JOB_ID = /^[a-z][a-z0-9_-]{0,58}$/;
const MAX_INT = 2 ** 53;

/** A refusal with the protocol's code (`malformed_job`, `malformed_model`, `wrong_shape`, ...). */
export class JobError extends Error {
  override name = "JobError";
  constructor(message: string, readonly code: string) {
    super(message);
  }
}

/** A training job (protocol 13.1). */
export interface JobSpec {
  job_id: string;
  version: number;
  model: { architecture: NetworkName; dims: number[] };
  parameters: number;
  mechanism: MechanismSpec;
  clip: number;
  epsilon: number;
  max_rounds: number;
  batch_size: number;
  max_versions: number;
  lr: number;
  momentum: number;
  version_validity_s: number;
  max_examples: number;
  expected_population: number | null;
  /** A shuffled job (protocol 13.7): the edge forwards its updates anonymous to the shuffler (the device's update is
   * the same). */
  shuffle: JobShuffle | null;
}

/** A shuffled job's accounting: its central delta and the fewest updates per version the shuffler releases from. */
export interface JobShuffle {
  delta: number;
  min_batch: number;
}

const REQUIRED = ["job_id", "version", "model", "parameters", "mechanism", "clip", "epsilon", "max_rounds", "batch_size",
  "max_versions", "lr", "version_validity_s", "max_examples"];
const OPTIONAL = ["momentum", "expected_population", "shuffle"];
const JOB_INTEGERS = ["version", "parameters", "max_rounds", "batch_size", "max_versions", "version_validity_s", "max_examples",
  "expected_population", "dims", "k"];

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= MAX_INT;
const isPositive = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v) && v > 0;

/** The JSON object of at most `limit` bytes of UTF-8 whose `integers` fields are written as integer literals
 * (`isWholeLiteral`); JobError `too_large`, or `bad`'s, otherwise. */
function jsonObject(data: Uint8Array, limit: number, what: string, bad: (why: string) => JobError,
                    integers: readonly string[]): Record<string, unknown> {
  if (data.length > limit) throw new JobError(`${what} of ${data.length} bytes`, "too_large");
  let raw: unknown;
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(data);
    raw = JSON.parse(text);
  } catch {
    throw bad("not JSON");
  }
  if (!isObject(raw)) throw bad("not an object");
  const written = integers.find((field) => !isWholeLiteral(text, field));
  if (written !== undefined) throw bad(`${written} is not written as an integer of at most 2^53`);
  return raw;
}

/** The job spec these (verified) bytes hold, its fields checked against each other; JobError otherwise. */
export function parseJob(data: Uint8Array): JobSpec {
  const bad = (why: string) => new JobError(`job spec: ${why}`, "malformed_job");
  const raw = jsonObject(data, MAX_JOB_SPEC_BYTES, "job spec", bad, JOB_INTEGERS);
  const keys = Object.keys(raw);
  const missing = REQUIRED.filter((k) => !(k in raw));
  const extra = keys.filter((k) => !REQUIRED.includes(k) && !OPTIONAL.includes(k));
  if (missing.length || extra.length) throw bad(`fields missing ${JSON.stringify(missing)} or unknown ${JSON.stringify(extra)}`);
  const r = raw as Record<string, unknown>;
  if (typeof r.job_id !== "string" || !JOB_ID.test(r.job_id)) throw bad("job_id must match [a-z][a-z0-9_-]{0,58}");
  for (const k of ["version", "parameters", "max_rounds", "batch_size", "max_versions", "version_validity_s", "max_examples"]) {
    if (!isCount(r[k])) throw bad(`${k} must be an integer >= 1`);
  }
  for (const k of ["clip", "epsilon", "lr"]) if (!isPositive(r[k])) throw bad(`${k} must be a number > 0`);
  if ((r.epsilon as number) > 100) throw bad(`epsilon ${String(r.epsilon)} out of range`);
  const momentum = r.momentum === undefined ? 0 : r.momentum;
  if (typeof momentum !== "number" || !(momentum >= 0 && momentum < 1)) throw bad("momentum must lie in [0, 1)");
  const population = r.expected_population ?? null;
  if (population !== null && !isCount(population)) throw bad("expected_population must be an integer >= 1");
  const shuffle = parseShuffle(r.shuffle ?? null, r.batch_size as number, bad);
  const model = r.model;
  if (!isObject(model) || Object.keys(model).sort().join() !== "architecture,dims" || typeof model.architecture !== "string"
      || !Array.isArray(model.dims) || !model.dims.every((k) => Number.isInteger(k))) throw bad("model must be {architecture, dims}");
  try {
    checkDims(model.architecture, model.dims as number[]);
  } catch (e) {
    throw bad((e as Error).message);
  }
  const size = parameterCount(model.dims as number[]);
  if (size !== r.parameters) throw bad(`${model.architecture} ${JSON.stringify(model.dims)} has ${size} parameters, the spec says ${String(r.parameters)}`);
  const mech = r.mechanism;
  if (!isObject(mech) || Object.keys(mech).some((k) => !["name", "p", "q", "k"].includes(k))) throw bad("mechanism must be {name, p, q[, k]}");
  if (mech.name !== "privunitg" && mech.name !== "projunit") throw bad(`mechanism ${JSON.stringify(mech.name)} is not one devices run (privunitg, projunit)`);
  const k = mech.k;
  if ((k === undefined) !== (mech.name === "privunitg") || (k !== undefined && !(Number.isInteger(k) && (k as number) >= 1 && (k as number) <= 1 << 20))) {
    throw bad("projunit takes k (1 .. 2^20), privunitg no k");
  }
  if (typeof mech.p !== "number" || typeof mech.q !== "number" || !(mech.p > 0 && mech.p < 1 && mech.q > 0 && mech.q < 1)) {
    throw bad("cap parameters p, q must lie in (0, 1)");
  }
  if (mech.name === "privunitg" && 4 * size > MAX_UPDATE_BYTES - 256) {
    throw bad(`a privunitg update of ${size} float32 values passes the edge's ${MAX_UPDATE_BYTES} bytes: use projunit`);
  }
  return {
    job_id: r.job_id, version: r.version as number, model: { architecture: model.architecture as NetworkName, dims: [...model.dims as number[]] },
    parameters: size, mechanism: { name: mech.name, p: mech.p, q: mech.q, ...(k === undefined ? {} : { k: k as number }) },
    clip: r.clip as number, epsilon: r.epsilon as number, max_rounds: r.max_rounds as number, batch_size: r.batch_size as number,
    max_versions: r.max_versions as number, lr: r.lr as number, momentum, version_validity_s: r.version_validity_s as number,
    max_examples: r.max_examples as number, expected_population: population, shuffle,
  };
}

/** A job's `shuffle` block, as a shuffled collection's (spec.ts) where it applies: delta in (0, 0.001), min_batch an
 * integer in [100, 10^8] and at most the job's batch size. */
function parseShuffle(raw: unknown, batchSize: number, bad: (why: string) => JobError): JobShuffle | null {
  if (raw === null) return null;
  if (!isObject(raw) || Object.keys(raw).sort().join() !== "delta,min_batch") throw bad("shuffle must be {delta, min_batch}");
  const { delta, min_batch: minBatch } = raw;
  if (typeof delta !== "number" || !(delta > 0 && delta < 1e-3)) throw bad("shuffle.delta must lie in (0, 0.001)");
  if (!Number.isInteger(minBatch) || !((minBatch as number) >= 100 && (minBatch as number) <= 100_000_000)) {
    throw bad("shuffle.min_batch must be an integer in [100, 100000000]");
  }
  if ((minBatch as number) > batchSize) throw bad(`shuffle.min_batch ${String(minBatch)} is above batch_size ${batchSize}`);
  return { delta, min_batch: minBatch as number };
}

/** The length of a version's bytes (protocol 13.3). */
export function snapshotLength(spec: JobSpec): number {
  return 4 + 3 + spec.model.architecture.length + 1 + 4 * spec.model.dims.length + 16 + 8 * spec.parameters;
}

/** The current model version of a job (protocol 13.2). */
export interface ModelDescriptor {
  job: string;
  job_version: number;
  version: number;
  architecture: string;
  dims: number[];
  parameters: number;
  sha256: string;
  size: number;
  issued_ms: number;
  expires_ms: number;
  done: boolean;
}

const DESCRIPTOR_FIELDS: Record<keyof ModelDescriptor, "string" | "int" | "list" | "boolean"> = {
  job: "string", job_version: "int", version: "int", architecture: "string", dims: "list", parameters: "int",
  sha256: "string", size: "int", issued_ms: "int", expires_ms: "int", done: "boolean",
};

/** The descriptor these (verified) bytes hold; JobError `malformed_model` otherwise. */
export function parseDescriptor(data: Uint8Array): ModelDescriptor {
  const bad = (why: string) => new JobError(`model descriptor: ${why}`, "malformed_model");
  const raw = jsonObject(data, MAX_DESCRIPTOR_BYTES, "model descriptor", bad,
    Object.entries(DESCRIPTOR_FIELDS).filter(([, kind]) => kind === "int" || kind === "list").map(([name]) => name));
  const names = Object.keys(DESCRIPTOR_FIELDS);
  if (Object.keys(raw).length !== names.length || !names.every((k) => k in raw)) throw bad("lacks or adds fields");
  for (const [name, kind] of Object.entries(DESCRIPTOR_FIELDS)) {
    const v = raw[name];
    const ok = kind === "int" ? typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= MAX_INT
      : kind === "list" ? Array.isArray(v) && v.every((w) => Number.isInteger(w) && w >= 1 && w <= 1 << 20)
        : typeof v === kind;
    if (!ok) throw bad(`field ${name} is not a valid ${kind}`);
  }
  if (!/^[0-9a-f]{64}$/.test(raw.sha256 as string)) throw bad("sha256 is not 64 hex digits");
  return raw as unknown as ModelDescriptor;
}

/** JobError `wrong_shape` unless the descriptor announces the spec's model (checked before anything is fetched). */
export function checkShape(d: ModelDescriptor, spec: JobSpec): void {
  const same = d.architecture === spec.model.architecture && d.parameters === spec.parameters
    && d.dims.length === spec.model.dims.length && d.dims.every((w, i) => w === spec.model.dims[i]);
  if (!same || d.size !== snapshotLength(spec)) {
    throw new JobError(`the model announced (${d.architecture} ${JSON.stringify(d.dims)}, ${d.parameters} parameters, ${d.size} bytes) is not the job's`, "wrong_shape");
  }
}

/** The msgpack bytes of one update (protocol 13.4): [1, job, job_version, model_version, columns sorted by name]. */
export function encodeUpdate(job: string, jobVersion: number, modelVersion: number, report: UpdateReport): Uint8Array {
  const w = new Writer();
  w.array(5);
  w.uint(UPDATE_WIRE_VERSION);
  w.str(job);
  w.uint(jobVersion);
  w.uint(modelVersion);
  const columns: [string, string, Uint8Array][] = [];
  if (report.seed !== undefined) {
    const seed = new Uint8Array(8);
    new DataView(seed.buffer).setBigUint64(0, report.seed, true);
    columns.push(["seed", "<u8", seed]);
  }
  const value = new Uint8Array(4 * report.value.length);
  const view = new DataView(value.buffer);
  report.value.forEach((v, i) => view.setFloat32(4 * i, v, true));
  columns.push(["value", "<f4", value]);
  w.array(columns.length);
  for (const [name, dtype, data] of columns) {
    w.array(3);
    w.str(name);
    w.str(dtype);
    w.bin(data);
  }
  return w.bytes();
}

/** Protocol 9.5 steps 1-2: the mean gradient of the first `max_examples` examples at theta, clipped into the unit
 * ball. RangeError for examples of the wrong shape, labels out of range or features that are not finite. */
export function clippedUpdateVector(spec: JobSpec, theta: Float64Array, examples: readonly Example[]): Float64Array {
  const net = new Network(spec.model.architecture, spec.model.dims);
  const rows = examples.slice(0, spec.max_examples);
  for (const e of rows) {
    if (e.features.length !== net.features) throw new RangeError(`an example has ${net.features} features, got ${e.features.length}`);
    for (let j = 0; j < e.features.length; j++) if (!Number.isFinite(e.features[j])) throw new RangeError("features must be finite");
    if (!(Number.isInteger(e.label) && e.label >= 0 && e.label < net.classes)) throw new RangeError(`labels must lie in 0..${net.classes - 1}`);
  }
  if (rows.length === 0) throw new RangeError("a device trains on at least one example");
  try {
    return clipToUnit(net.meanGradient(theta, rows), spec.clip);
  } catch (e) {
    if (e instanceof ModelError) throw new RangeError(e.message);
    throw e;
  }
}

/** The update bytes of these examples at model version `modelVersion` (theta): protocol 13.5, then 9.4. */
export function computeUpdate(spec: JobSpec, modelVersion: number, theta: Float64Array, examples: readonly Example[], rng: Random): Uint8Array {
  const x = clippedUpdateVector(spec, theta, examples);
  return encodeUpdate(spec.job_id, spec.version, modelVersion, perturbUpdate(x, spec.mechanism, rng));
}
