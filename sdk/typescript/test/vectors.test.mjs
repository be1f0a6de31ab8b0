// Every file under tests/vectors/ (written by tests/vectors/generate.py): the same verdicts and bytes as Python.
import "../dist/mechanisms/all.js"; // every mechanism, statically
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";

import { authorization, devicePseudonym } from "../dist/auth.js";
import { fromBase64, toBase64, utf8 } from "../dist/bytes.js";
import { EdgeError, TrustError } from "../dist/errors.js";
import { checkReportTime } from "../dist/device.js";
import { jsonOf, MAX_JSON_DEPTH } from "../dist/edge.js";
import { backoffS, retryAfterSeconds, verdictsOf } from "../dist/outbox.js";
import { parsePointer } from "../dist/pointer.js";
import { judge, makePolicy, DEFAULT_POLICY } from "../dist/policy.js";
import { trustedKeysFromJson } from "../dist/signatures.js";
import { parseSpec } from "../dist/spec.js";
import { checkPointer, checkSpec } from "../dist/trust.js";
import { columnBytes, encodeEnvelope } from "../dist/wire.js";
import { HierarchicalHistogram, SquareWave } from "../dist/mechanisms/distribution.js";
import { checkMemoCase, checkCollectorCase, checkHashCase } from "./memo_checks.mjs";

const DIR = fileURLToPath(new URL("../../../tests/vectors/", import.meta.url));
const load = (name) => JSON.parse(readFileSync(DIR + name, "utf8"));
const unb64 = (text) => (text === null ? null : fromBase64(text));

async function outcome(check) {
  try {
    await check();
  } catch (exc) {
    if (exc instanceof TrustError) return { verdict: "refuse", code: exc.code };
    throw exc;
  }
  return { verdict: "accept" };
}

const KNOWN = new Set(["trust.json", "policy.json", "wire.json", "auth.json", "memo.json", "collectors.json", "hashes.json",
                       "distribution.json", "delivery.json", "training.json", "rules.json"]);

test("every vector file is one this suite checks", () => {
  const files = readdirSync(DIR).filter((f) => f.endsWith(".json"));
  assert.ok(files.length >= 4);
  for (const f of files) assert.ok(KNOWN.has(f), `${f} is not checked by the TypeScript SDK's tests`);
});

const TRUST = load("trust.json");
const KEYS = trustedKeysFromJson(TRUST.pinned_keys);

for (const c of TRUST.pointers) {
  test(`trust.json pointer: ${c.name}`, async () => {
    const seen = { version: c.seen[0], sequence: c.seen[1] };
    const got = await outcome(() => checkPointer(unb64(c.pointer), unb64(c.signature), KEYS, c.collection, seen, c.now_ms));
    assert.deepEqual(got, c.expected);
  });
}

for (const c of TRUST.specs) {
  test(`trust.json spec: ${c.name}`, async () => {
    const got = await outcome(() => checkSpec(unb64(c.spec), unb64(c.signature), KEYS, parsePointer(unb64(c.pointer))));
    assert.deepEqual(got, c.expected);
  });
}

const POLICY = load("policy.json");

test("policy.json: the default policy is the vectors' defaults", () => {
  const d = POLICY.defaults;
  assert.deepEqual([DEFAULT_POLICY.maxEpsilonPerReport, DEFAULT_POLICY.maxEpsilonPerDay, DEFAULT_POLICY.maxLifetimePerCollection,
                    DEFAULT_POLICY.maxLifetimePerDevice],
                   [d.max_epsilon_per_report, d.max_epsilon_per_day, d.max_lifetime_per_collection, d.max_lifetime_per_device]);
});

for (const c of POLICY.cases) {
  test(`policy.json: ${c.name}`, () => {
    const policy = c.policy === null ? DEFAULT_POLICY : makePolicy(c.policy);
    const v = judge(parseSpec(c.spec), policy, c.committed);
    assert.deepEqual({ accepted: v.accepted, code: v.code, commitment: v.commitment }, c.expected, v.reason);
  });
}

for (const c of load("wire.json").cases) {
  test(`wire.json: ${c.name}`, () => {
    const blocks = c.attributes.map((a) => ({
      attribute: a.attribute, rows: a.rows,
      columns: a.columns.map((col) => ({ name: col.name, dtype: col.dtype, data: columnBytes({ dtype: col.dtype, values: col.values }) })),
    }));
    const bytes = encodeEnvelope({ collection: c.collection, specVersion: c.spec_version, devices: c.devices.map(BigInt),
                                   timestampsMs: c.timestamps_ms, blocks });
    assert.equal(toBase64(bytes), c.envelope);
  });
}

const AUTH = load("auth.json");
for (const c of AUTH.signatures) {
  test(`auth.json signature: ${c.method} ${c.path}`, () => {
    const key = Uint8Array.from(c.key.match(/../g).map((h) => parseInt(h, 16)));
    assert.equal(authorization(c.device, key, c.method, c.path, unb64(c.body), c.timestamp_ms), c.authorization);
  });
}
for (const c of AUTH.pseudonyms) {
  test(`auth.json pseudonym: ${c.device}`, () => {
    assert.equal(devicePseudonym(c.collection, c.device).toString(), c.pseudonym);
  });
}

// The deterministic parts of perturbation (tests/vectors/memo.json, collectors.json, hashes.json).
for (const [file, check] of [["memo.json", checkMemoCase], ["collectors.json", checkCollectorCase], ["hashes.json", checkHashCase]]) {
  let cases = [];
  try {
    cases = load(file).cases;
  } catch {
    test(`${file} exists`, () => assert.fail(`tests/vectors/${file} is missing`));
  }
  for (const c of cases) test(`${file}: ${c.name}`, async () => check(c));
}
// The distribution mechanisms' reports from given uniforms (tests/vectors/distribution.json): Square Wave to 1e-12,
// the hierarchical histogram's (level, row, bit) exactly.
const DISTRIBUTION = load("distribution.json");
const close = (got, want, what) => {
  assert.ok(Math.abs(got - want) <= 1e-12 * Math.abs(want) + 1e-12, `${what}: ${got} vs ${want}`);
};

for (const c of DISTRIBUTION.square_wave) {
  test(`distribution.json square wave: eps ${c.epsilon}, t ${c.t}, u ${c.u}`, () => {
    const mech = new SquareWave(c.epsilon);
    close(mech.halfWidth, c.half_width, "half_width");
    close(mech.p, c.p, "p");
    close(mech.q, c.q, "q");
    close(mech.scale, c.scale, "scale");
    close(mech.fromUniform(c.t, c.u), c.report, "report");
  });
}

for (const c of DISTRIBUTION.hierarchical_histogram) {
  test(`distribution.json hierarchical histogram: eps ${c.epsilon}, ${c.bins}/${c.fanout}, t ${c.t}, u ${c.uniforms}`, () => {
    const mech = new HierarchicalHistogram(c.epsilon, c.bins, c.fanout);
    assert.deepEqual(mech.fromUniforms(c.t, c.uniforms), c.report);
  });
}

test("distribution.json has cases of both mechanisms", () => {
  assert.ok(DISTRIBUTION.square_wave.length >= 90 && DISTRIBUTION.hierarchical_histogram.length >= 40);
});
void utf8;

const DELIVERY = load("delivery.json");

for (const c of DELIVERY.report_times) {
  test(`delivery.json report time: ${c.name}`, () => {
    let got = "accept";
    try {
      checkReportTime(c.timestamp_ms, c.clock_ms);
    } catch (exc) {
      assert.ok(exc instanceof RangeError);
      got = "refuse";
    }
    assert.equal(got, c.expected);
  });
}

for (const c of DELIVERY.answers) {
  test(`delivery.json answer: ${c.name}`, () => {
    assert.deepEqual(verdictsOf({ status: c.status, headers: new Headers(), body: utf8(c.body) }, c.reports), c.verdicts);
  });
}

for (const c of DELIVERY.backoff) {
  test(`delivery.json backoff: attempt ${c.attempt}, Retry-After ${c.retry_after_s}`, () => {
    const got = backoffS(c.attempt, c.retry_after_s, c.base_s, c.cap_s, c.u);
    assert.ok(Math.abs(got - c.wait_s) <= 1e-12 * Math.max(1, c.wait_s), `${got} != ${c.wait_s}`);
  });
}

test("delivery.json Retry-After headers", () => {
  for (const c of DELIVERY.retry_after) assert.equal(retryAfterSeconds(c.header), c.seconds, JSON.stringify(c.header));
});

for (const c of DELIVERY.json_bodies) {
  test(`delivery.json JSON answer: ${c.name}`, () => {
    let got = "accept";
    try {
      jsonOf(utf8(c.body), 200, "an answer");
    } catch (exc) {
      assert.ok(exc instanceof EdgeError && exc.reason === "bad_answer");
      got = "refuse";
    }
    assert.equal(got, c.expected);
    assert.equal(MAX_JSON_DEPTH, DELIVERY.max_json_depth);
  });
}
