// The TypeScript SDK's training math on given inputs (tests/typescript/test_typescript_training.py compares with
// Python): per-example losses and mean gradients of a network, the clipped update vector, ndtri, and n privunitg
// reports of one vector drawn from a seeded SplitMix64 stream (uniforms on the 2^-53 grid, as the SDK's Random).
// Usage: node training_math.mjs IN.json OUT.json
import { readFileSync, writeFileSync } from "node:fs";
import { mix64, GAMMA, MASK64 } from "../../sdk/typescript/dist/u64.js";
import { Network } from "../../sdk/typescript/dist/training/model.js";
import { ndtri } from "../../sdk/typescript/dist/training/special.js";
import { perturbUpdate } from "../../sdk/typescript/dist/training/gradients.js";

class SeededRandom {
  constructor(seed) { this.state = BigInt(seed) & MASK64; }
  word64() { this.state = (this.state + GAMMA) & MASK64; return mix64(this.state); }
  uniform() { return Number(this.word64() >> 11n) * 2 ** -53; }
  below(n) { return Math.floor(this.uniform() * n); }
}

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = {};
if (job.network) {
  const { name, dims, theta, x, y } = job.network;
  const net = new Network(name, dims);
  const t = Float64Array.from(theta);
  out.losses = x.map((row, i) => net.loss(t, row, y[i]));
  out.gradient = Array.from(net.meanGradient(t, x.map((row, i) => ({ features: row, label: y[i] }))));
}
if (job.ndtri) out.ndtri = job.ndtri.map(ndtri);
if (job.reports) {
  const { mechanism, vector, n, seed } = job.reports;
  const rng = new SeededRandom(seed);
  const x = Float64Array.from(vector);
  const rows = [];
  const seeds = [];
  for (let i = 0; i < n; i++) {
    const r = perturbUpdate(x, mechanism, rng);
    rows.push(Array.from(r.value));
    if (r.seed !== undefined) seeds.push(r.seed.toString());
  }
  out.reports = { value: rows, seed: seeds };
}
writeFileSync(process.argv[3], JSON.stringify(out));
