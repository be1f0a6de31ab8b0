// A fleet of TypeScript devices that train through the real edge (the Node counterpart of `ldp simulate --join URL
// --token F --train JOB`, `ldpstream.sgd.fleet`): each device is a `TrainingDevice` with its own state directory and
// its own rows, joined with the job's enrolment token; the fleet runs in rounds of the job's batch size (a seeded
// random order), each device training on its rows and flushing, then waits (bounded) for the coordinator's next
// version. It stops when the job is done, every device is spent, or the time bound passes; prints a JSON summary, with
// `sent`: [device, model version] of each update made, in order (the version the fleet waited for before the round:
// the coordinator steps only after B updates, so the round's devices all train at it).
// With "seeds" (one integer in [0, 2^53) per device), device i draws its noise from the SplitMix64 stream seeded by
// seeds[i] (uniform: (word >> 11) / 2^53; `word64`: the next word), which `ts_training.SplitMix64` replays in Python;
// else from the platform's cryptographic generator.
//
//   node tests/typescript/train_devices.mjs MANIFEST.json
//
// MANIFEST: {"edge": URL, "job": JOB, "token": TOKEN, "keys": {what `ldp spec keys --json` prints},
//            "x": "rows.f32" (float32 LE, n x features), "y": "labels.u8" (uint8, n), "features": d,
//            "devices": [[row indices of device 0], ...], "state": DIR, "timeout_s": 600, "seed": 0,
//            "policy": {optional PolicyOptions}, "seeds": [optional: one per device]}
import { readFileSync } from "node:fs";
import { seedWords } from "../../sdk/typescript/dist/training/gradients.js";
import { TrainingDevice } from "../../sdk/typescript/dist/training/index.js";

const VERSION_WAIT_MS = 30_000;
const m = JSON.parse(readFileSync(process.argv[2], "utf8"));
const started = Date.now();
const deadline = started + 1000 * (m.timeout_s ?? 600);
const xb = readFileSync(m.x);
const x = new Float32Array(xb.buffer, xb.byteOffset, xb.byteLength / 4);
const y = readFileSync(m.y);
const rowsOf = (i) => m.devices[i].map((r) => ({ features: x.subarray(r * m.features, (r + 1) * m.features), label: y[r] }));

let state = BigInt(m.seed ?? 0) + 0x9e3779b97f4a7c15n; // the round order's SplitMix64 stream
const next = () => {
  state = (state + 0x9e3779b97f4a7c15n) & ((1n << 64n) - 1n);
  let z = state;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & ((1n << 64n) - 1n);
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & ((1n << 64n) - 1n);
  return Number((z ^ (z >> 31n)) >> 11n) / 2 ** 53;
};
const shuffled = (list) => {
  const a = [...list];
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
};

const GOLDEN = 0x9e3779b97f4a7c15n;
const BLOCK = 4096;
class SplitMix64 { // the SDK's `Random`: SplitMix64's words mix64(s + (j + 1) golden), j = 0, 1, ...
  constructor(seed) { this.state = BigInt(seed); this.at = BLOCK; }
  #word() {
    if (this.at === BLOCK) {
      this.words = seedWords(this.state, BLOCK);
      this.state = (this.state + BigInt(BLOCK) * GOLDEN) & ((1n << 64n) - 1n);
      this.at = 0;
    }
    const j = this.at++;
    return [this.words.hi[j], this.words.lo[j]];
  }
  uniform() {
    const [hi, lo] = this.#word();
    return (hi * 2 ** 21 + (lo >>> 11)) / 2 ** 53;
  }
  below() { throw new Error("a training device draws no below(n) (section 13.5): the replay would not see it"); }
  word64() {
    const [hi, lo] = this.#word();
    return (BigInt(hi) << 32n) | BigInt(lo);
  }
}

const run = { devices: m.devices.length, joined: 0, refused: {}, updates: 0, taken: 0, outcomes: {}, last_version: -1,
              done: false, seconds: 0, update_ms: [], sent: [] };
const count = (table, key) => { table[key] = (table[key] ?? 0) + 1; };

const fleet = [];
for (let i = 0; i < m.devices.length; i++) {
  try {
    fleet.push(await TrainingDevice.join({ edge: m.edge, job: m.job, token: m.token, trustedKeys: m.keys,
                                           policy: m.policy ?? {}, storage: `${m.state}/device-${i}`,
                                           ...(m.seeds ? { random: new SplitMix64(m.seeds[i]) } : {}) }));
  } catch (exc) {
    count(run.refused, exc.code ?? (exc.reason ? `edge_${exc.reason}` : String(exc.name)));
    fleet.push(null);
  }
}
let live = fleet.map((d, i) => (d === null ? -1 : i)).filter((i) => i >= 0);
run.joined = live.length;

async function step(i) {
  const device = fleet[i];
  const t0 = performance.now();
  try {
    const made = await device.train(rowsOf(i));
    if (made === null) return ["waiting", 0];
    run.update_ms.push(performance.now() - t0);
    return ["sent", await device.flush()];
  } catch (exc) {
    if (exc.name === "SpecRefused") return [`refused:${exc.code}`, 0];
    if (exc.name === "BudgetExceeded") return ["spent", 0];
    if (exc.name === "EdgeError") return [`edge:${exc.reason || exc.status}`, 0];
    throw exc;
  }
}

async function waitForVersion(device, version) {
  const until = Math.min(deadline, Date.now() + VERSION_WAIT_MS);
  while (Date.now() < until) {
    try {
      const [d] = await device.model();
      if (d.version > version) return d.version;
    } catch (exc) {
      if (exc.name === "SpecRefused" && exc.code === "done") return version + 1;
      if (exc.name !== "EdgeError") throw exc;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return version;
}

let version = live.length ? await waitForVersion(fleet[live[0]], -1) : -1; // the first version published
while (Date.now() < deadline && live.length && !run.done) {
  const batch = fleet[live[0]].spec.batch_size;
  const order = shuffled(live);
  for (let start = 0; start < order.length && !run.done; start += batch) {
    const dealt = order.slice(start, start + batch);
    const results = await Promise.all(dealt.map(step));
    results.forEach(([outcome, taken], k) => {
      count(run.outcomes, outcome);
      if (outcome === "sent") {
        run.updates++;
        run.sent.push([dealt[k], version]);
      }
      run.taken += taken;
    });
    if (results.some(([o]) => o === "refused:done")) run.done = true;
    else run.last_version = version = await waitForVersion(fleet[live[0]], version);
    if (Date.now() >= deadline) break;
  }
  live = live.filter((i) => {
    const d = fleet[i];
    return d.ledger.lifetimeSpent(d.key) + d.spec.epsilon <= d.spec.epsilon * d.spec.max_rounds * (1 + 1e-9);
  });
}
run.seconds = (Date.now() - started) / 1000;
const ms = run.update_ms.sort((a, b) => a - b);
run.update_ms = ms.length ? { n: ms.length, median: ms[ms.length >> 1], max: ms[ms.length - 1] } : null;
console.log(JSON.stringify(run));
