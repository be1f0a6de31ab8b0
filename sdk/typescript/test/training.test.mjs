// tests/vectors/training.json (protocol section 13): the TypeScript device reads the job, the signed model descriptor
// and the version bytes as Python does, computes the same clipped vector, and makes the same update from the same
// scripted uniforms (header and seed byte for byte, values within 1e-9 of the largest |value| plus the float32
// rounding, as 13.5 says).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

import { concatBytes, fromBase64, toBase64, utf8 } from "../dist/bytes.js";
import { sha256Hex } from "../dist/hashes.js";
import { specMessage, trustedKeysFromJson, verifyBlock } from "../dist/signatures.js";
import { decodeSnapshot } from "../dist/training/model.js";
import { MODEL_DOMAIN } from "../dist/training/train.js";
import { clippedUpdateVector, encodeUpdate, parseDescriptor, parseJob, snapshotLength } from "../dist/training/job.js";
import { perturbUpdate } from "../dist/training/gradients.js";

const V = JSON.parse(readFileSync(fileURLToPath(new URL("../../../tests/vectors/training.json", import.meta.url)), "utf8"));
const keys = trustedKeysFromJson(V.keys);

/** A `Random` that replays the vectors' uniforms and words. */
class Scripted {
  constructor(uniforms, words) {
    this.u = [...uniforms];
    this.w = words.map((x) => BigInt(x));
  }
  uniform() {
    if (this.u.length === 0) throw new Error("scripted uniforms ran out");
    return this.u.shift();
  }
  below() {
    throw new Error("updates draw no below()");
  }
  word64() {
    if (this.w.length === 0) throw new Error("scripted words ran out");
    return this.w.shift();
  }
}

test("the job spec verifies under the spec key and parses", async () => {
  const bytes = fromBase64(V.job.bytes);
  await verifyBlock(keys.spec, fromBase64(V.job.signature), specMessage(utf8(V.job.signed_key), bytes), "job");
  const spec = parseJob(bytes);
  assert.equal(`job/${spec.job_id}@${spec.version}`, V.job.signed_key);
  assert.equal(snapshotLength(spec), V.job.model_bytes);
  const tampered = bytes.slice();
  tampered[10] ^= 1;
  await assert.rejects(verifyBlock(keys.spec, fromBase64(V.job.signature), specMessage(utf8(V.job.signed_key), tampered), "job"));
});

test("the model descriptor verifies under the online key; the version bytes hash, decode and match theta", async () => {
  const d = fromBase64(V.model.descriptor);
  await verifyBlock(keys.pointer, fromBase64(V.model.signature), concatBytes(MODEL_DOMAIN, d), "model");
  await assert.rejects(verifyBlock(keys.spec, fromBase64(V.model.signature), concatBytes(MODEL_DOMAIN, d), "model"));
  const descriptor = parseDescriptor(d);
  const model = fromBase64(V.model.bytes);
  assert.equal(sha256Hex(model), descriptor.sha256);
  assert.equal(model.length, descriptor.size);
  const spec = parseJob(fromBase64(V.job.bytes));
  const snap = decodeSnapshot(model, { name: spec.model.architecture, dims: spec.model.dims });
  assert.deepEqual(Array.from(snap.params), V.model.theta);
  assert.throws(() => decodeSnapshot(model, { name: "mlp", dims: [3, 4, 2] }), /the job trains/);
});

test("the clipped update vector is Python's (float tolerance)", () => {
  const spec = parseJob(fromBase64(V.job.bytes));
  const x = clippedUpdateVector(spec, Float64Array.from(V.model.theta), V.clipped.examples);
  assert.equal(x.length, V.clipped.vector.length);
  x.forEach((v, i) => assert.ok(Math.abs(v - V.clipped.vector[i]) <= 1e-12, `${i}: ${v} vs ${V.clipped.vector[i]}`));
});

/** The gap from a float32 |x| to the next float32 up: one ulp. */
function ulp32(x) {
  const f = new Float32Array([Math.abs(x)]);
  const bits = new Uint32Array(f.buffer);
  const below = f[0];
  bits[0] += 1;
  return f[0] - below;
}

/** Protocol 13.5's agreement of two update bodies: every byte before the value column's data exact (envelope, job,
 * versions, seed, column headers); each float32 value within 1e-9 of the vector's largest |value|, plus one float32
 * ulp (a libm's last-ulp difference can round it to the neighbouring float32). */
function assertSameUpdate(body, expected, values) {
  const width = 4 * values.length;
  assert.equal(body.length, expected.length);
  assert.equal(toBase64(body.subarray(0, body.length - width)), toBase64(expected.subarray(0, expected.length - width)));
  const view = new DataView(body.buffer, body.byteOffset + body.length - width, width);
  const top = Math.max(...values.map(Math.abs));
  values.forEach((want, i) => {
    const got = view.getFloat32(4 * i, true);
    assert.ok(Math.abs(got - want) <= 1e-9 * top + ulp32(want), `value ${i}: ${got} vs ${want}`);
  });
}

for (const u of V.updates) {
  test(`update from scripted uniforms: ${u.name}`, () => {
    const spec = parseJob(utf8(u.job));
    const report = perturbUpdate(Float64Array.from(u.vector), spec.mechanism, new Scripted(u.uniforms, u.words));
    if (u.seed !== null) assert.equal(report.seed, BigInt(u.seed));
    const body = encodeUpdate(spec.job_id, spec.version, u.model_version, report);
    assertSameUpdate(body, fromBase64(u.body), u.value);
  });
}

test("two bodies agree by their header bytes and their values within the tolerance, not otherwise", () => {
  const u = V.updates[2];
  const body = fromBase64(u.body);
  const width = 4 * u.value.length;
  const values = new Float32Array(body.slice(body.length - width).buffer);
  const top = values.reduce((j, v, i) => (Math.abs(v) > Math.abs(values[j]) ? i : j), 0);
  const moved = (factor) => {
    const copy = Float32Array.from(values);
    copy[top] = factor === null ? values[top] + Math.sign(values[top]) * ulp32(values[top]) : values[top] * factor;
    return concatBytes(body.subarray(0, body.length - width), new Uint8Array(copy.buffer));
  };
  assertSameUpdate(moved(null), body, u.value);
  assert.throws(() => assertSameUpdate(moved(1 + 1e-6), body, u.value));
  const header = body.slice();
  header[body.length - width - 10] ^= 1;
  assert.throws(() => assertSameUpdate(header, body, u.value));
});

test("the descriptor and the version bytes are refused in the protocol's order (9.2, 9.3)", async () => {
  const { checkDescriptor, checkJobSpec, checkModelBytes } = await import("../dist/training/train.js");
  const spec = await checkJobSpec(fromBase64(V.job.bytes), fromBase64(V.job.signature), keys, "tiny", 1, 0);
  await assert.rejects(checkJobSpec(fromBase64(V.job.bytes), fromBase64(V.job.signature), keys, "tiny", 2, 0), { code: "bad_signature" });
  await assert.rejects(checkJobSpec(fromBase64(V.job.bytes), fromBase64(V.job.signature), keys, "tiny", 1, 2), { code: "rollback" });
  const d = fromBase64(V.model.descriptor);
  const block = fromBase64(V.model.signature);
  const good = await checkDescriptor(d, block, keys, spec, -1, V.now_ms);
  assert.equal(good.version, 5);
  const tampered = d.slice();
  tampered[5] ^= 1;
  await assert.rejects(checkDescriptor(tampered, block, keys, spec, -1, V.now_ms), { code: "bad_signature" });
  await assert.rejects(checkDescriptor(d, null, keys, spec, -1, V.now_ms), { code: "unsigned" });
  await assert.rejects(checkDescriptor(d, block, keys, spec, 6, V.now_ms), { code: "rollback" });
  await assert.rejects(checkDescriptor(d, block, keys, spec, -1, good.expires_ms + 1), { code: "expired" });
  await assert.rejects(checkDescriptor(d, block, keys, spec, -1, good.issued_ms - 10 * 60 * 1000), { code: "issued_in_future" });
  const wider = { ...spec, model: { architecture: "softmax", dims: [4, 2] }, parameters: 10 };
  await assert.rejects(checkDescriptor(d, block, keys, wider, -1, V.now_ms), { code: "wrong_shape" });
  const model = fromBase64(V.model.bytes);
  assert.equal(checkModelBytes(model, good, spec).length, spec.parameters);
  const flipped = model.slice();
  flipped[flipped.length - 1] ^= 1;
  assert.throws(() => checkModelBytes(flipped, good, spec), { code: "hash_mismatch" });
  assert.throws(() => checkModelBytes(concatBytes(model, new Uint8Array(1)), good, spec), { code: "too_large" });
});

for (const c of V.specs) {
  test(`a job's shuffle block (13.7): ${c.name}`, () => {
    const data = utf8(c.json);
    if (c.code === "accepted") {
      const spec = parseJob(data);
      assert.ok(spec.shuffle !== null && spec.shuffle.min_batch <= spec.batch_size);
    } else {
      assert.throws(() => parseJob(data), (e) => e.code === c.code);
    }
  });
}
