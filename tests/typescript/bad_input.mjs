// The TypeScript SDK against a hostile or failing world, through a real edge: node bad_input.mjs JOB.json
// (JOB: {edge, collection, token, keys}). Between the devices and the edge stands a proxy of ours that can tamper
// with the edge's answers, answer 429/5xx in its place, lose an answer, or be unreachable. Prints a JSON summary;
// every assertion is here, the Python test checks what reached the aggregator.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { readFileSync } from "node:fs";

import {
  BudgetExceeded, Device, EdgeError, memoryStorage, SpecRefused, StateError,
} from "../../sdk/typescript/dist/index.js";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const RECORD = { battery_level: 55, network_type: "wifi" };
const quiet = { sleep: async () => {} }; // the backoff's waits are taken as asked, but not slept through here

/** A proxy in front of the real edge; `mode` decides what it does with each request. */
function proxy() {
  const state = { mode: "forward", posts: 0, failures: 0 };
  const server = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = Buffer.concat(chunks);
    const isPost = req.method === "POST" && req.url.endsWith("/reports");
    if (isPost) state.posts += 1;
    if (isPost && state.failures > 0 && ["429", "503", "500"].includes(state.mode)) {
      state.failures -= 1;
      const headers = { "Content-Type": "application/json", ...(state.mode === "429" ? { "Retry-After": "1" } : {}) };
      res.writeHead(Number(state.mode), headers);
      res.end(JSON.stringify({ error: "injected", reason: "injected" }));
      return;
    }
    const upstream = await fetch(job.edge + req.url, {
      method: req.method, body: ["GET", "HEAD"].includes(req.method) ? undefined : body,
      headers: Object.fromEntries(Object.entries(req.headers).filter(([k]) => !["host", "connection", "content-length"].includes(k))),
    });
    let answer = Buffer.from(await upstream.arrayBuffer());
    const headers = Object.fromEntries(upstream.headers.entries());
    delete headers["content-length"];
    delete headers["content-encoding"];
    delete headers["transfer-encoding"];
    if (state.mode === "tamper-spec" && req.url.includes("/specs/")) answer = Buffer.from(answer.toString().replace('"epsilon":2.0', '"epsilon":2.5'));
    if (state.mode === "tamper-pointer" && /\/v1\/collections\/[^/]+$/.test(req.url)) answer = Buffer.from(answer.toString().replace(/"sequence":(\d+)/, (_, n) => `"sequence":${Number(n) + 1}`));
    if (state.mode === "unsigned") delete headers["ldp-signature"];
    if (isPost && state.mode === "lose-answer" && state.failures > 0) { // the edge took it; the device never hears
      state.failures -= 1;
      req.socket.destroy();
      return;
    }
    res.writeHead(upstream.status, headers);
    res.end(answer);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve({
    url: `http://127.0.0.1:${server.address().port}`, state, close: () => server.close(),
  })));
}

const summary = {};
const p = await proxy();
const join = (extra = {}) => Device.join({ edge: p.url, collection: job.collection, token: job.token,
                                            trustedKeys: job.keys, storage: memoryStorage(), outbox: quiet, ...extra });
async function refused(promise, code) {
  try {
    await promise;
  } catch (exc) {
    assert.ok(exc instanceof SpecRefused, `${exc}`);
    assert.equal(exc.code, code);
    return true;
  }
  assert.fail(`not refused (${code})`);
}

try {
  // policy refusals: nothing enrolled (the Python test counts the enrolments), the verdict kept for the app
  const storage = memoryStorage();
  await refused(join({ policy: { maxEpsilonPerReport: 1 }, storage }), "policy_epsilon_per_report");
  assert.equal(JSON.parse(storage.data.get("device")).collections[job.collection].verdict.code, "policy_epsilon_per_report");
  await refused(join({ policy: { allowedMechanisms: ["grr"] } }), "policy_mechanism");
  await refused(join({ policy: { maxEpsilonPerDay: 1.5 } }), "policy_epsilon_per_day");
  // tampered answers: refused before anything is parsed, nothing enrolled
  for (const [mode, code] of [["tamper-spec", "bad_signature"], ["tamper-pointer", "bad_signature"], ["unsigned", "unsigned"]]) {
    p.state.mode = mode;
    await refused(join(), code);
  }
  p.state.mode = "forward";
  await assert.rejects(join({ trustedKeys: { keys: [] } }), /no pinned spec key/);
  summary.refusals = "ok";

  // storage full: the report is not made, nothing charged; with room again it is
  let room = true;
  const base = memoryStorage();
  const full = { get: (k) => base.get(k), set: (k, v) => { if (!room) throw new Error("QuotaExceededError"); base.set(k, v); } };
  const d1 = await join({ storage: full });
  room = false;
  await assert.rejects(d1.report(RECORD), StateError);
  assert.equal(d1.ledger.spent(d1.spec, Date.now()), 0);
  assert.equal(d1.pending, 0);
  room = true;
  await d1.report(RECORD);
  assert.equal(d1.ledger.spent(d1.spec, Date.now()), 2.0);
  // storage cleared under a running device: its ledger is written whole again at the next change (no refund)
  base.data.clear();
  await assert.rejects(d1.report(RECORD), BudgetExceeded);
  await d1.report(RECORD, Date.now() - 3_600_000); // the previous window: charged, and the ledger rewritten with both
  assert.equal(JSON.parse(base.get("ledger")).collections[job.collection].lifetime_spent, 4.0);
  summary.storage = "ok";

  // 429 (with Retry-After) twice, then through: sent once
  const d2 = await join();
  await d2.report(RECORD);
  Object.assign(p.state, { mode: "429", failures: 2 });
  assert.equal(await d2.flush(), 1);
  // 503 through every attempt: kept, no crash; then sent
  const d3 = await join();
  await d3.report(RECORD);
  Object.assign(p.state, { mode: "503", failures: 6 });
  assert.equal(await d3.flush(), 0);
  assert.equal(d3.pending, 1);
  assert.equal(await d3.flush(), 1);
  // a 500 keeps the report for the next flush
  const d4 = await join();
  await d4.report(RECORD);
  Object.assign(p.state, { mode: "500", failures: 1 });
  assert.equal(await d4.flush(), 0);
  assert.equal(await d4.flush(), 1);
  assert.equal(d4.pending, 0);
  // an answer lost after the edge took the report: sent again, and the edge or the aggregator counts it once
  const d5 = await join();
  await d5.report(RECORD);
  Object.assign(p.state, { mode: "lose-answer", failures: 1 });
  assert.equal(await d5.flush(), 1);
  assert.equal(d5.pending, 0);
  summary.retries = "ok";

  // offline for days: nothing sent, the pointer expires (reports stop), stale reports dropped, budget not refunded
  let now = Date.now();
  const d6 = await join({ clock: () => now });
  await d6.report(RECORD);
  p.state.mode = "forward";
  const saved = p.url;
  p.close();
  const offline = await Device.join({ edge: saved, collection: job.collection, token: job.token, trustedKeys: job.keys,
                                      storage: memoryStorage(), outbox: quiet }).catch((exc) => exc);
  assert.ok(offline instanceof EdgeError && offline.status === 0, `${offline}`);
  now += 3 * 86_400_000;
  await assert.rejects(d6.report(RECORD), (exc) => exc instanceof SpecRefused && exc.code === "expired");
  assert.equal(await d6.flush(), 0);
  assert.equal(d6.pending, 0); // older than a day: dropped, never sent
  assert.equal(d6.transport.outbox.dropped, 1);
  assert.equal(d6.ledger.lifetimeSpent(job.collection), 2.0);
  summary.offline = "ok";
  summary.sent = 4; // d2..d5 one report each (d1 never flushed, d6's was dropped)
  summary.enrolled = 6; // d1..d6: no refused device enrolled
  summary.posts = p.state.posts;
} finally {
  p.close();
}
console.log(JSON.stringify(summary));
