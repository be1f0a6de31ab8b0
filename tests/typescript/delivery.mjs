// The TypeScript SDK through the delivery scenarios of tests/integration/test_device_delivery.py (the Python SDK runs
// the same ones in-process): node delivery.mjs JOB.json, JOB = {proxy, collection, token, keys, record, scenarios,
// outage?}. Prints one JSON object: per scenario what came of it and how long each call took (seconds).
import { readFileSync } from "node:fs";

import { Device, memoryStorage } from "../../sdk/typescript/dist/index.js";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const HOUR = 3_600_000;
const out = {};

function errorOf(exc) {
  return { name: exc?.name ?? "", status: exc?.status ?? null, reason: exc?.reason ?? "", message: String(exc?.message ?? exc) };
}

async function timed(call) {
  const started = performance.now();
  try {
    return { value: await call(), seconds: (performance.now() - started) / 1000 };
  } catch (exc) {
    return { error: errorOf(exc), seconds: (performance.now() - started) / 1000 };
  }
}

function join(edge, options = {}, extra = {}) {
  return Device.join({ edge, collection: job.collection, token: job.token, trustedKeys: job.keys, policy: null,
                       storage: memoryStorage(), outbox: options, ...extra });
}

for (const s of job.scenarios) {
  const edge = `${job.proxy}/${s.route}`;
  if (s.kind === "join") {
    const r = await timed(() => join(edge, s.options));
    out[s.name] = { error: r.error ?? null, seconds: r.seconds };
    continue;
  }
  const device = await join(edge, s.options);
  const now = Date.now();
  for (const hoursAgo of s.hours_ago) await device.report(job.record, Math.round(now - hoursAgo * HOUR));
  const flush = device.flush();
  const during = s.report_during ? await timed(() => device.report(job.record, now - 12 * HOUR)) : null;
  const r = await timed(() => flush);
  out[s.name] = { taken: r.value ?? null, error: r.error ?? null, seconds: r.seconds, stats: device.stats(),
                  report_seconds: during?.seconds ?? null, report_error: during?.error ?? null };
}

if (job.outage) {
  // A long outage against the real edge: the reports of the last hours wait in the outbox, one of them stamped an
  // hour ahead by a clock that was wrong then; the link comes back and every device flushes.
  const o = job.outage;
  let down = true, offset = 0;
  const fetcher = (url, init) => (down && String(url).includes("/reports")
    ? Promise.reject(new TypeError("the network is down")) : fetch(url, init));
  const devices = [];
  for (let d = 0; d < o.devices; d++) {
    devices.push(await join(o.edge, { attempts: 2, baseBackoffS: 0.01 }, { fetch: fetcher, clock: () => Date.now() + offset }));
  }
  const now = Date.now();
  for (const device of devices) for (const h of o.hours_ago) await device.report(job.record, Math.round(now - h * HOUR));
  offset = HOUR; // the clock jumps an hour ahead, a report is stamped by it, and the clock is set right again
  await devices[0].report(job.record, now + HOUR);
  offset = 0;
  let during = 0;
  for (const device of devices) during += await device.flush();
  down = false;
  let taken = 0, again = 0;
  for (const device of devices) taken += await device.flush();
  for (const device of devices) again += await device.flush();
  const total = { delivered: {}, dropped: {}, pending: 0 };
  for (const device of devices) {
    const st = device.stats();
    for (const [k, v] of Object.entries(st.delivered)) total.delivered[k] = (total.delivered[k] ?? 0) + v;
    for (const [k, v] of Object.entries(st.dropped)) total.dropped[k] = (total.dropped[k] ?? 0) + v;
    total.pending += st.pending;
  }
  out.outage = { during, taken, again, stats: total };
}

console.log(JSON.stringify(out));
process.exit(0); // a dripping server may still hold a socket open: the answers are in
