// Reports of n simulated devices made by the TypeScript SDK's collector, as one wire envelope (for the Python
// estimators in test_statistics.py): node perturb_reports.mjs JOB.json OUT.msgpack
// JOB: {"spec": JSON text, "records": [record, ...], "strategy": {"hash", "npz" (base64)} | null, "seed": integer}.
// Each record is one device; a spec with a lifetime budget gets a fresh secret per device, from
// crypto.getRandomValues like the noise. With a seed, crypto.getRandomValues is replaced here by xoshiro128**
// (Blackman and Vigna 2018) seeded by splitmix32, so a statistical check sees the same reports on every run: the SDK's
// exact draws (uniforms on the 2^-53 grid, integers by rejection) still come from the words it is given.
import { readFileSync, writeFileSync } from "node:fs";

import "../../sdk/typescript/dist/mechanisms/all.js"; // every mechanism, statically
import { fromBase64 } from "../../sdk/typescript/dist/bytes.js";
import { Collector } from "../../sdk/typescript/dist/collector.js";
import { FactorizationMechanism } from "../../sdk/typescript/dist/mechanisms/factorization.js";
import { CryptoRandom } from "../../sdk/typescript/dist/random.js";
import { parseSpec } from "../../sdk/typescript/dist/spec.js";
import { columnBytes, encodeEnvelope } from "../../sdk/typescript/dist/wire.js";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
if (job.seed !== undefined) seedGetRandomValues(job.seed);

function seedGetRandomValues(seed) {
  let x = seed >>> 0;
  const splitmix32 = () => {
    x = (x + 0x9e3779b9) >>> 0;
    let z = x;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
  const s = Uint32Array.from([splitmix32(), splitmix32(), splitmix32(), splitmix32()]);
  const rotl = (v, k) => ((v << k) | (v >>> (32 - k))) >>> 0;
  const next = () => {
    const out = Math.imul(rotl(Math.imul(s[1], 5) >>> 0, 7), 9) >>> 0;
    const t = (s[1] << 9) >>> 0;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 11);
    return out;
  };
  const getRandomValues = (array) => {
    const bytes = new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
    for (let i = 0; i < bytes.length; i += 4) {
      const word = next();
      for (let k = 0; k < 4 && i + k < bytes.length; k++) bytes[i + k] = (word >>> (8 * k)) & 0xff;
    }
    return array;
  };
  const subtle = globalThis.crypto.subtle;
  Object.defineProperty(globalThis, "crypto", { value: { getRandomValues, subtle }, configurable: true });
}
const spec = parseSpec(job.spec);
const strategies = new Map();
if (job.strategy) {
  strategies.set(job.strategy.hash, await FactorizationMechanism.fromNpz(fromBase64(job.strategy.npz), job.strategy.hash));
}
const collector = new Collector(spec, strategies);
const rng = new CryptoRandom();
const blocks = new Map();
job.records.forEach((record, row) => {
  const secret = spec.privacy === null ? null : rng.word64();
  for (const { attribute, report } of collector.perturb(record, rng, secret)) {
    let block = blocks.get(attribute);
    if (block === undefined) {
      block = { attribute, rows: [], columns: new Map() };
      blocks.set(attribute, block);
    }
    block.rows.push(row);
    for (const [name, column] of Object.entries(report)) {
      const c = block.columns.get(name) ?? { dtype: column.dtype, parts: [] };
      c.parts.push(columnBytes(column));
      block.columns.set(name, c);
    }
  }
});
const join = (parts) => {
  const out = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
};
const envelope = encodeEnvelope({
  collection: spec.name, specVersion: spec.version, devices: job.records.map((_, i) => BigInt(i + 1)),
  timestampsMs: job.records.map(() => 1_795_788_000_000),
  blocks: [...blocks.values()].map((b) => ({
    attribute: b.attribute, rows: b.rows,
    columns: [...b.columns.entries()].map(([name, c]) => ({ name, dtype: c.dtype, data: join(c.parts) })),
  })),
});
writeFileSync(process.argv[3], envelope);
