// The ledger's rules (windows, clock jumps, the day and lifetime caps, memos), the policy's fields, the outbox's
// bounds and backoff: the Python SDK's rules (tests/device/test_ledger*.py, test_outbox_bounds.py), here in TypeScript.
import "../dist/mechanisms/all.js"; // every mechanism, statically
import { test } from "node:test";
import assert from "node:assert/strict";

import { readFileSync } from "node:fs";

import { Collector } from "../dist/collector.js";
import { BudgetExceeded, PolicyError } from "../dist/errors.js";
import { PrivacyLedger } from "../dist/ledger.js";
import { backoffS, envelopeOf, Outbox } from "../dist/outbox.js";
import { DEFAULT_POLICY, makePolicy } from "../dist/policy.js";
import { parseSpec } from "../dist/spec.js";
import { memoryStorage } from "../dist/storage.js";

const HOUR = 3_600_000;
const T = 1_795_788_000_000;
const spec = parseSpec(JSON.stringify({ name: "diag", version: 1, epsilon: 2.0, windows: ["1h"],
  attributes: [{ name: "x", type: "numeric", range: [0, 1] }] }));

test("a window's budget is the spec's epsilon; the next window starts afresh", async () => {
  const ledger = new PrivacyLedger();
  await ledger.commit("diag", 8);
  await ledger.charge(spec, T, [], DEFAULT_POLICY);
  assert.throws(() => ledger.check(spec, T + 1, [], DEFAULT_POLICY), BudgetExceeded);
  await ledger.charge(spec, T + HOUR, [], DEFAULT_POLICY);
  assert.equal(ledger.lifetimeSpent("diag"), 4.0);
});

test("the policy's day and lifetime caps hold; nothing is charged when refused", async () => {
  const ledger = new PrivacyLedger();
  await ledger.commit("diag", 8);
  const policy = makePolicy({ maxEpsilonPerDay: 3 });
  await ledger.charge(spec, T, [], policy);
  assert.throws(() => ledger.check(spec, T + HOUR, [], policy), /maxEpsilonPerDay/);
  for (let h = 1; h < 4; h++) await ledger.charge(spec, T + h * 24 * HOUR, [], DEFAULT_POLICY);
  assert.throws(() => ledger.check(spec, T + 99 * 24 * HOUR, [], DEFAULT_POLICY), /committed/);
  assert.equal(ledger.lifetimeSpent("diag"), 8.0);
});

test("a clock jump far ahead and back locks nothing out and forgets no spend", async () => {
  const ledger = new PrivacyLedger();
  await ledger.charge(spec, T);
  await ledger.charge(spec, Date.UTC(2100, 0, 1)); // the year 2100
  assert.throws(() => ledger.check(spec, T + 1), BudgetExceeded); // back: that window is still kept
  await ledger.charge(spec, T + HOUR);
  for (let i = 2; i < 70; i++) await ledger.charge(spec, T + i * HOUR); // 64 windows kept: the earliest dropped
  assert.throws(() => ledger.check(spec, T), /no longer keeps/);
  assert.throws(() => ledger.check(spec, 0), /no longer keeps/); // before a dropped window: refused, not reset
});

test("memos are charged once each; a new value pays, an old one does not", async () => {
  const lifetime = parseSpec(JSON.stringify({ name: "life", version: 1, privacy: { per_report: 1, lifetime: 2 },
    attributes: [{ name: "c", type: "categorical", values: ["a", "b", "c"] }] }));
  const ledger = new PrivacyLedger();
  const memo = (v) => [{ key: `c/x/${v}`, epsilon: 1 }];
  await ledger.charge(lifetime, T, memo(0));
  await ledger.charge(lifetime, T + HOUR, memo(0));
  await ledger.charge(lifetime, T + 2 * HOUR, memo(1));
  assert.equal(ledger.lifetimeSpent("life"), 2);
  assert.throws(() => ledger.check(lifetime, T + 3 * HOUR, memo(2)), /lifetime budget/);
  const again = PrivacyLedger.fromJSON(ledger.toJSON());
  assert.deepEqual([...again.memos("life").keys()], ["c/x/0", "c/x/1"]);
});

test("a ledger of legacy memo names (before m1) pays for none again; new values pay under m1 names", async () => {
  const vectors = JSON.parse(readFileSync(new URL("../../../tests/vectors/collectors.json", import.meta.url), "utf8"));
  const c = vectors.cases.find((v) => v.memos !== undefined);
  const life = parseSpec(c.spec), n = c.records.length, secret = BigInt(c.secrets[2]);
  const legacy = c.legacy_memos[2 * n], names = c.memos[2 * n], later = c.memos[2 * n + 1];
  const old = { format: 3, days: { spent: {}, dropped: null }, commitments: {}, collections: { [life.name]: {
    windows: { spent: {}, dropped: null }, lifetime_spent: 0.75 * legacy.length,
    memos: Object.fromEntries(legacy.map((k) => [k, 0.75])), secret: secret.toString(16).padStart(16, "0") } } };
  let saved = "";
  const ledger = PrivacyLedger.fromJSON(JSON.stringify(old), async (text) => { saved = text; });
  const collector = new Collector(life), memos = collector.memos(c.records[0], secret);
  assert.deepEqual(memos.map((m) => m.key), names);
  await ledger.charge(life, T, memos);
  const again = PrivacyLedger.fromJSON(saved, async (text) => { saved = text; }); // as after a restart
  assert.equal(again.lifetimeSpent(life.name), 0.75 * legacy.length);
  assert.deepEqual(Object.fromEntries(again.memos(life.name)), old.collections[life.name].memos);
  await again.charge(life, T + HOUR, memos);
  const fresh = collector.memos(c.records[1], secret);
  assert.deepEqual(fresh.map((m) => m.key), later);
  await again.charge(life, T + 2 * HOUR, fresh);
  const last = PrivacyLedger.fromJSON(saved);
  assert.deepEqual([...last.memos(life.name).keys()].sort(), [...legacy, ...later].sort());
  const paid = fresh.reduce((sum, m) => sum + m.epsilon, 0);
  assert.ok(Math.abs(last.lifetimeSpent(life.name) - (0.75 * legacy.length + paid)) < 1e-12);
});

test("a failed write charges nothing", async () => {
  let fail = false;
  const ledger = new PrivacyLedger(async () => { if (fail) throw new Error("full"); });
  await ledger.charge(spec, T);
  fail = true;
  await assert.rejects(ledger.charge(spec, T + HOUR), /full/);
  assert.equal(ledger.lifetimeSpent("diag"), 2);
  assert.equal(ledger.spent(spec, T + HOUR), 0);
});

test("the policy: defaults, camelCase and snake_case fields, and refusals of bad ones", () => {
  assert.equal(makePolicy().maxEpsilonPerReport, 8);
  assert.equal(makePolicy({ max_epsilon_per_day: 4 }).maxEpsilonPerDay, 4);
  assert.throws(() => makePolicy({ maxEpsilonPerReport: 0 }), PolicyError);
  assert.throws(() => makePolicy({ maxEpsilonPerReport: Infinity }), PolicyError);
  assert.throws(() => makePolicy({ epsilon: 1 }), PolicyError);
  assert.throws(() => makePolicy({ allowedMechanisms: ["magic"] }), PolicyError);
  assert.throws(() => makePolicy({ maxLifetimePerCollection: 40 }), PolicyError);
});

function report(i, size = 100) {
  return { version: 1, timestampMs: T + i, madeMs: T + i, size, blocks: [{ attribute: 0, columns: [
    { name: "value", dtype: "<f8", data: new Uint8Array(8) }] }] };
}

test("the outbox keeps its bounds, oldest dropped first, and survives a reopen", async () => {
  const storage = memoryStorage();
  const outbox = await Outbox.open(storage, "diag", { maxReports: 5, maxBytes: 350 });
  for (let i = 0; i < 8; i++) await outbox.add(report(i));
  assert.equal(outbox.length, 3); // 350 bytes: three reports of 100
  assert.deepEqual(outbox.pending().map((r) => r.timestampMs - T), [5, 6, 7]);
  const reopened = await Outbox.open(storage, "diag");
  assert.equal(reopened.length, 3);
  assert.equal(await reopened.dropStale(T + 7 + 86_400_000 + 1), 3);
});

test("reports of one device join into one envelope, rows in order", () => {
  const env = envelopeOf("diag", 42n, [report(0), report(1), report(2)]);
  assert.deepEqual(env.blocks[0].rows, [0, 1, 2]);
  assert.equal(env.blocks[0].columns[0].data.length, 24);
  assert.deepEqual(env.devices, [42n, 42n, 42n]);
});

test("the backoff is full jitter, capped, at least Retry-After", () => {
  assert.equal(backoffS(1, 0, 0.2, 30, 0.5), 0.1);
  assert.equal(backoffS(10, 0, 0.2, 30, 1), 30);
  assert.equal(backoffS(1, 7, 0.2, 30, 0.5), 7);
});

test("a directory keeps a device's values as 0600 files, atomically replaced, in the Python SDK's formats", async () => {
  const { mkdtempSync, statSync, readdirSync, rmSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const { directoryStorage } = await import("../dist/node.js");
  const dir = mkdtempSync(join(tmpdir(), "ldp-device-"));
  try {
    const storage = directoryStorage(join(dir, "phone"));
    assert.equal(await storage.get("ledger"), undefined);
    const ledger = new PrivacyLedger((json) => storage.set("ledger", json));
    await ledger.commit("diag", 8);
    await ledger.charge(spec, T, [], DEFAULT_POLICY);
    const text = await storage.get("ledger");
    assert.equal(JSON.parse(text).format, 3);
    assert.equal(PrivacyLedger.fromJSON(text).lifetimeSpent("diag"), 2);
    assert.equal(statSync(join(dir, "phone", "ledger.json")).mode & 0o777, 0o600);
    assert.deepEqual(readdirSync(join(dir, "phone")).sort(), ["ledger.json", "outbox"]); // no temporary left behind
    await storage.set("outbox/diag", "[]");
    assert.equal(await storage.get("outbox/diag"), "[]");
    await assert.rejects(async () => storage.get("../escape"), /not a storage key/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
