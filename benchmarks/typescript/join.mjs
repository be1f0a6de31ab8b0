// Join time of the TypeScript SDK against a local edge: N devices joining one after another (pointer, spec, Ed25519
// verification, policy, enrolment), each timed. node join.mjs JOB.json -> JSON {"ms": [...]}.
import { readFileSync } from "node:fs";

import { Device, memoryStorage } from "../../sdk/typescript/dist/index.js";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const ms = [];
for (let i = 0; i < job.devices; i++) {
  const start = performance.now();
  await Device.join({ edge: job.edge, collection: job.collection, token: job.token, trustedKeys: job.keys, storage: memoryStorage() });
  ms.push(performance.now() - start);
}
console.log(JSON.stringify({ ms }));
