// The training decoders on hostile bytes (protocol section 13): tests/vectors/training.json's `mutations` (bytes near
// each rule of a job spec, a model descriptor and a version's bytes) reach the verdict the protocol declares, as the
// Python decoders do; and seeded random mutations of them each parse or throw the SDK's typed error (JobError with a
// refusal code, ModelError), never another error, and nothing of a size they announce is allocated before it is checked.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

import { fromBase64, utf8 } from "../dist/bytes.js";
import { checkShape, JobError, MAX_DESCRIPTOR_BYTES, MAX_JOB_SPEC_BYTES, parseDescriptor, parseJob, snapshotLength } from "../dist/training/job.js";
import { decodeSnapshot, ModelError } from "../dist/training/model.js";
import { generator } from "./fuzz_support.mjs";

const V = JSON.parse(readFileSync(fileURLToPath(new URL("../../../tests/vectors/training.json", import.meta.url)), "utf8"));
const CODES = { job: ["malformed_job", "too_large"], descriptor: ["malformed_model", "too_large"] };

/** The SDK's verdict on these bytes: "accepted", or the refusal code (a snapshot that does not decode:
 * `malformed_model`); any other error fails the test. */
function verdict(kind, bytes) {
  try {
    if (kind === "job") parseJob(bytes);
    else if (kind === "descriptor") parseDescriptor(bytes);
    else decodeSnapshot(bytes);
    return "accepted";
  } catch (e) {
    if (kind === "snapshot" && e instanceof ModelError) return "malformed_model";
    if (kind !== "snapshot" && e instanceof JobError && CODES[kind].includes(e.code)) return e.code;
    throw e;
  }
}

for (const m of V.mutations) {
  test(`${m.kind}: ${m.name} is ${m.verdict}`, () => {
    assert.equal(verdict(m.kind, fromBase64(m.bytes)), m.verdict);
  });
}

const HOSTILE = ["1.0", "1e999", "-1", "0", "9007199254740993", "null", "true", "\"\"", "[]", "{}", "[3.0,2]", "-0",
  "\"\\u0000\"", "1e-400", "[1048577,2]", "\"é\"", "[[[[[]]]]]"];

/** One of: bits flipped, cut short, random bytes, a JSON value replaced after a ':' or a ',' (text), a repeated or
 * inserted fragment, or bytes the size of a whole limit. */
function mutate(bytes, random) {
  const pick = (n) => Math.floor(random() * n);
  const kind = pick(6);
  if (kind === 0) {
    const b = Uint8Array.from(bytes);
    for (let j = 0; j < 1 + pick(4); j++) if (b.length) b[pick(b.length)] ^= 1 << pick(8);
    return b;
  }
  if (kind === 1) return bytes.subarray(0, pick(bytes.length + 1));
  if (kind === 2) return Uint8Array.from({ length: pick(300) }, () => pick(256));
  const text = new TextDecoder().decode(bytes);
  if (kind === 3) {
    const stops = [...text.matchAll(/[:,[]/g)].map((x) => x.index + 1);
    if (stops.length === 0) return utf8(HOSTILE[pick(HOSTILE.length)]);
    const at = stops[pick(stops.length)];
    const end = text.slice(at).search(/[,}\]]/);
    return utf8(text.slice(0, at) + HOSTILE[pick(HOSTILE.length)] + (end < 0 ? "" : text.slice(at + end)));
  }
  if (kind === 4) {
    const at = pick(text.length + 1);
    const from = pick(text.length + 1);
    return utf8(text.slice(0, at) + text.slice(from, from + pick(40)) + text.slice(at));
  }
  const limit = [MAX_JOB_SPEC_BYTES, MAX_DESCRIPTOR_BYTES][pick(2)];
  return Uint8Array.from({ length: limit + pick(2) }, (_, i) => bytes[i % Math.max(bytes.length, 1)] ?? 32);
}

test("seeded mutations of every vector each parse or throw the SDK's typed error", () => {
  const random = generator(40);
  const accepted = { job: 0, descriptor: 0, snapshot: 0 };
  for (const m of V.mutations) {
    const bytes = fromBase64(m.bytes);
    for (let i = 0; i < 60; i++) {
      const mutated = mutate(bytes, random);
      if (verdict(m.kind, mutated) === "accepted") accepted[m.kind]++;
    }
  }
  assert.ok(accepted.job > 0 && accepted.descriptor > 0, JSON.stringify(accepted)); // mutations near the rules pass too
});

test("what a spec or a descriptor accepts round-trips, and a descriptor's shape is checked before any fetch", () => {
  const spec = parseJob(fromBase64(V.job.bytes));
  assert.equal(snapshotLength(spec), V.job.model_bytes);
  const d = parseDescriptor(fromBase64(V.model.descriptor));
  checkShape(d, spec);
  const huge = { ...d, size: 2 ** 53, dims: [1 << 20, 64, 10], parameters: 67109514 };
  assert.throws(() => checkShape(huge, spec), { code: "wrong_shape" });
});

test("a snapshot announcing a huge model is refused before its parameters are allocated", () => {
  const head = (count, dims) => {
    const b = new Uint8Array(4 + 3 + 3 + 1 + 4 * dims.length + 16 + 64);
    const view = new DataView(b.buffer);
    b.set(utf8("LDPM"), 0);
    b.set([1, 8, 3], 4);
    b.set(utf8("mlp"), 7);
    b[10] = dims.length;
    dims.forEach((w, i) => view.setUint32(11 + 4 * i, w, true));
    view.setBigUint64(11 + 4 * dims.length + 8, count, true);
    return b;
  };
  const before = process.memoryUsage().arrayBuffers;
  for (const [count, dims] of [[2n ** 26n, [8192, 8191, 2]], [2n ** 64n - 1n, [3, 4, 2]], [26n, [3, 4, 2]], [67108874n, [1 << 20, 64, 2]]]) {
    assert.throws(() => decodeSnapshot(head(count, dims)), ModelError);
    assert.throws(() => decodeSnapshot(head(count, dims), { name: "mlp", dims: [3, 4, 2] }), ModelError);
  }
  assert.ok(process.memoryUsage().arrayBuffers - before < 1 << 20);
});
