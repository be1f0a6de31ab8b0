// N devices of the TypeScript SDK joining one collection through a real edge, each reporting its record once:
// node fleet.mjs JOB.json  (JOB: {edge, collection, token, keys, records: [record, ...], concurrency})
// Prints {"joined", "reported", "sent", "pending", "retried_429", "errors": [...], "seconds"} as JSON.
import { readFileSync } from "node:fs";

import { Device, EdgeError, memoryStorage } from "../../sdk/typescript/dist/index.js";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const summary = { joined: 0, reported: 0, sent: 0, pending: 0, retried_429: 0, errors: [], seconds: 0 };
const started = performance.now();
let next = 0;

async function joinWithRetries(options) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await Device.join(options);
    } catch (exc) {
      // a burst of enrolments over the edge's per-token rate: wait and ask again (an app's backend would)
      if (exc instanceof EdgeError && exc.status === 429 && attempt < 20) {
        summary.retried_429 += 1;
        await new Promise((resolve) => setTimeout(resolve, 500 + 200 * attempt));
        continue;
      }
      throw exc;
    }
  }
}

async function worker() {
  for (;;) {
    const i = next++;
    if (i >= job.records.length) return;
    try {
      const device = await joinWithRetries({ edge: job.edge, collection: job.collection, token: job.token,
                                             trustedKeys: job.keys, storage: memoryStorage() });
      summary.joined += 1;
      await device.report(job.records[i]);
      summary.reported += 1;
      const sent = await device.flush();
      summary.sent += sent;
      if (sent !== 1 && summary.errors.length < 20) {
        summary.errors.push(`device ${i}: not sent (${device.transport.lastStatus} ${device.transport.lastReason})`);
      }
      summary.pending += device.pending;
    } catch (exc) {
      if (summary.errors.length < 20) summary.errors.push(`device ${i}: ${exc?.name}: ${exc?.message}`);
    }
  }
}

await Promise.all(Array.from({ length: job.concurrency ?? 32 }, worker));
summary.seconds = (performance.now() - started) / 1000;
console.log(JSON.stringify(summary));
