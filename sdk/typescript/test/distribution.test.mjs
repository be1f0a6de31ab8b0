// The distribution mechanisms on the device (src/mechanisms/distribution.ts): Square Wave's reports unbiased with the
// closed-form variance (a seeded simulation), the hierarchical histogram's level uniform and its bit exactly eps-LDP,
// bad input refused with Python's messages, and a spec naming sw or hh joined through the mixed collector.
import { test } from "node:test";
import assert from "node:assert/strict";

import { Collector } from "../dist/collector.js";
import { LDPError } from "../dist/errors.js";
import { hadamardBit } from "../dist/mechanisms/frequency.js";
import { loadMechanisms, modules, needsOf } from "../dist/mechanisms/optional.js";
import { EVERY_MECHANISM } from "../dist/policy.js";
import { parseSpec } from "../dist/spec.js";

await loadMechanisms({ distribution: true }); // on demand, as a device does for a spec naming sw or hh
const { HierarchicalHistogram, makeDistribution, SquareWave } = modules.distribution;

/** A seeded Random (sfc32): uniforms on the 2^-53 grid like CryptoRandom, reproducible. */
class SeededRandom {
  constructor(seed) {
    this.s = [0x9e3779b9, 0x243f6a88, 0xb7e15162, seed >>> 0];
    for (let i = 0; i < 20; i++) this.u32();
  }

  u32() {
    let [a, b, c, d] = this.s;
    const t = (((a + b) | 0) + d) | 0;
    d = (d + 1) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) | 0;
    this.s = [a, b, c, d];
    return t >>> 0;
  }

  uniform() {
    return ((this.u32() >>> 5) * 67108864 + (this.u32() >>> 6)) / 9007199254740992;
  }

  below(n) {
    const limit = 4294967296 - (4294967296 % n);
    for (;;) {
      const x = this.u32();
      if (x < limit) return x % n;
    }
  }
}

const Z = 4.0;

test("Square Wave's constants are Python's (SquareWave(1.0, bins=16): b 0.2561, worst-case variance 5.5161)", () => {
  const mech = new SquareWave(1.0, 16);
  assert.equal(Math.round(mech.halfWidth * 1e4) / 1e4, 0.2561);
  assert.equal(Math.round(mech.worstCaseVariance() * 1e4) / 1e4, 5.5161);
  assert.ok(Math.abs(mech.p / mech.q - Math.E) < 1e-12); // p / q = e^eps
  assert.ok(Math.abs(2 * mech.halfWidth * mech.p + mech.q - 1) < 1e-12); // the density integrates to 1
});

for (const epsilon of [0.5, 1.0, 4.0]) {
  test(`Square Wave at eps ${epsilon}: t* unbiased, its variance the closed form a + b t^2 (seeded, n from the bound)`, () => {
    const mech = new SquareWave(epsilon);
    const [a, b] = mech.varianceCoefficients();
    const rng = new SeededRandom(Math.round(epsilon * 1000));
    const n = 200_000;
    const bound = (1 + mech.window) / mech.scale;
    for (const t of [-1.0, -0.3, 0.0, 0.8, 1.0]) {
      let sum = 0, sum2 = 0, sum4 = 0;
      for (let i = 0; i < n; i++) {
        const r = mech.perturb(t, rng).value.values[0];
        assert.ok(Math.abs(r) <= bound * (1 + 1e-12));
        const d = r - t;
        sum += d;
        sum2 += d * d;
        sum4 += d ** 4;
      }
      const variance = a + b * t * t;
      const bias = Math.abs(sum / n) / Math.sqrt(variance / n);
      assert.ok(bias <= Z, `t = ${t}: mean off by ${bias.toFixed(2)} standard errors`);
      const m2 = sum2 / n, own = Math.sqrt((sum4 / n - m2 * m2) / n);
      const z = Math.abs(m2 - variance) / own;
      assert.ok(z <= Z, `t = ${t}: variance ${m2} vs closed form ${variance} (${z.toFixed(2)} standard errors)`);
    }
  });
}

test("Square Wave's density ratio is at most e^eps: u = s t* lies in t's window with probability 2 w p/2", () => {
  const mech = new SquareWave(1.0);
  const rng = new SeededRandom(7);
  const n = 200_000, t = 0.25;
  let inside = 0;
  for (let i = 0; i < n; i++) if (Math.abs(mech.sample(t, rng) * mech.scale - t) <= mech.window) inside++;
  const expected = mech.window * mech.p; // (p/2) times the window's width 2 w
  const se = Math.sqrt((expected * (1 - expected)) / n);
  assert.ok(Math.abs(inside / n - expected) <= Z * se, `${inside / n} vs ${expected}`);
});

for (const [epsilon, bins, fanout] of [[1.0, 64, 4], [2.0, 27, 3], [0.5, 16, 2]]) {
  test(`hierarchical histogram eps ${epsilon}, ${bins} bins, fanout ${fanout}: every level equally likely`, () => {
    const mech = new HierarchicalHistogram(epsilon, bins, fanout);
    const h = mech.height;
    assert.equal(fanout ** h, bins);
    // exactly: level l + 1 holds u0 in [l / h, (l + 1) / h), a width of 1 / h whatever the value
    for (let l = 0; l < h; l++) {
      for (const u0 of [l / h, (l + 1) / h - 2 ** -53]) {
        for (const t of [-1, 0.1, 1]) assert.equal(mech.fromUniforms(t, [u0, 0.5, 0.5]).level, l + 1);
      }
    }
    // and by simulation: chi-square of the level counts (h - 1 degrees of freedom), far from its tail
    const rng = new SeededRandom(bins);
    const n = 60_000, counts = new Array(h).fill(0);
    for (let i = 0; i < n; i++) {
      const r = mech.perturb(0.3, rng);
      assert.equal(r.level.dtype, "|u1");
      assert.equal(r.row.dtype, "<u4");
      assert.equal(r.bit.dtype, "|u1");
      assert.ok(r.row.values[0] >= 0 && r.row.values[0] < mech.rows && (r.bit.values[0] === 0 || r.bit.values[0] === 1));
      counts[r.level.values[0] - 1]++;
    }
    const chi2 = counts.reduce((s, c) => s + (c - n / h) ** 2 / (n / h), 0);
    assert.ok(chi2 < 3 * (h - 1) + 6 * Math.sqrt(2 * (h - 1)) + 1, `levels ${counts}: chi-square ${chi2}`);
  });

  test(`hierarchical histogram eps ${epsilon}, ${bins} bins, fanout ${fanout}: exactly eps-LDP over every output`, () => {
    const mech = new HierarchicalHistogram(epsilon, bins, fanout);
    const h = mech.height, m = mech.rows, p = mech.p;
    // Pr[(level, row, bit) | t], from the mechanism itself: the level and row from uniforms inside their intervals
    // (their probabilities 1/h and 1/m), the bit kept (u2 < p, probability p) or flipped (probability 1 - p).
    const pmf = (t) => {
      const out = new Map();
      for (let l = 0; l < h; l++) {
        for (let s = 0; s < m; s++) {
          const u = [(l + 0.5) / h, (s + 0.5) / m];
          for (const [u2, prob] of [[p / 2, p], [(1 + p) / 2, 1 - p]]) {
            const r = mech.fromUniforms(t, [...u, u2]);
            const key = `${r.level}/${r.row}/${r.bit}`;
            out.set(key, (out.get(key) ?? 0) + prob / (h * m));
          }
        }
      }
      return out;
    };
    const centres = Array.from({ length: bins }, (_, i) => -1 + (2 * i + 1) / bins);
    const pmfs = [...centres, -1, 1].map(pmf);
    const bound = Math.exp(epsilon) * (1 + 1e-12);
    let worst = 0;
    for (const x of pmfs) {
      assert.ok(Math.abs([...x.values()].reduce((a, b) => a + b, 0) - 1) < 1e-12);
      for (const y of pmfs) {
        for (const [key, px] of x) {
          const py = y.get(key) ?? 0;
          assert.ok(py > 0, `output ${key} possible for one input and not another`);
          worst = Math.max(worst, px / py);
        }
      }
    }
    assert.ok(worst <= bound, `ratio ${worst} > e^eps ${Math.exp(epsilon)}`);
    assert.ok(worst >= Math.exp(epsilon) * (1 - 1e-12), "the bound is attained (the bit carries the value)");
    // and the bit is H[row, node] exactly when u2 < p (probability p), flipped from u2 = p on
    for (const t of [-1, -0.2, 0.3, 1]) {
      for (const [u0, u1] of [[0.0, 0.4], [0.7, 0.05], [0.999, 0.999]]) {
        const kept = mech.fromUniforms(t, [u0, u1, p - 2 ** -53]);
        const node = Math.floor(mech.leaf(t) / fanout ** (h - kept.level));
        assert.equal(kept.bit, hadamardBit(kept.row, node));
        assert.equal(mech.fromUniforms(t, [u0, u1, p]).bit, 1 - kept.bit);
        assert.equal(mech.fromUniforms(t, [u0, u1, 0.0]).bit, kept.bit);
      }
    }
  });
}

test("hierarchical histogram: h c H[row, v] (2 bit - 1) at level 1 is unbiased for the level-1 node of t (seeded)", () => {
  const mech = new HierarchicalHistogram(1.0, 64, 4);
  const h = mech.height, c = 1 / (2 * mech.p - 1);
  const rng = new SeededRandom(5);
  const n = 100_000, t = 0.3, own = Math.floor(mech.leaf(t) / 4 ** (h - 1));
  const sums = [0, 0, 0, 0];
  for (let i = 0; i < n; i++) {
    const r = mech.perturb(t, rng);
    if (r.level.values[0] !== 1) continue;
    const sign = 2 * r.bit.values[0] - 1;
    for (let v = 0; v < 4; v++) sums[v] += h * c * (hadamardBit(r.row.values[0], v) ? sign : -sign);
  }
  for (let v = 0; v < 4; v++) {
    const expected = v === own ? 1 : 0;
    const se = Math.sqrt((h * c * c - expected) / n); // E[term^2] = h c^2
    assert.ok(Math.abs(sums[v] / n - expected) <= Z * se, `node ${v}: ${sums[v] / n} vs ${expected}`);
  }
});

test("bad input is refused with Python's messages", () => {
  const refuses = (f, message) => assert.throws(f, (e) => e instanceof LDPError && message.test(e.message));
  for (const Mech of [SquareWave, HierarchicalHistogram]) {
    refuses(() => new Mech(0), /epsilon must be finite and > 0, got 0/);
    refuses(() => new Mech(-1), /epsilon must be finite and > 0/);
    refuses(() => new Mech(NaN), /epsilon must be finite and > 0, got NaN/);
    refuses(() => new Mech(Infinity), /epsilon must be finite and > 0/);
    refuses(() => new Mech(25), /epsilon 25 is above the supported maximum 20 for distribution mechanisms/);
    refuses(() => new Mech(1, 3), /bins must be an integer in \[4, 1024\], got 3/);
    refuses(() => new Mech(1, 2048), /bins must be an integer in \[4, 1024\], got 2048/);
    refuses(() => new Mech(1, 64.5), /bins must be an integer in \[4, 1024\], got 64.5/);
    const mech = new Mech(1, 16);
    const rng = new SeededRandom(1);
    for (const t of [1.5, -1.0000001, NaN, Infinity]) refuses(() => mech.perturb(t, rng), /a value must lie in \[-1, 1\]/);
  }
  refuses(() => new SquareWave(1, 64, 3), /the smoothing level must lie in \(0, 1\] or be 2 or 4, got 3/);
  refuses(() => new SquareWave(1, 64, 0), /the smoothing level must lie in \(0, 1\] or be 2 or 4, got 0/);
  assert.equal(new SquareWave(1, 64, 4).smoothing, 4);
  refuses(() => new HierarchicalHistogram(1, 64, 1), /fanout must be an integer in \[2, 16\], got 1/);
  refuses(() => new HierarchicalHistogram(1, 64, 17), /fanout must be an integer in \[2, 16\], got 17/);
  refuses(() => new HierarchicalHistogram(1, 64, 2.5), /fanout must be an integer in \[2, 16\], got 2.5/);
  refuses(() => new HierarchicalHistogram(1, 60, 4), /bins must be a power of the fanout 4, got 60/);
  refuses(() => new HierarchicalHistogram(1, 32, 4), /bins must be a power of the fanout 4, got 32/);
  refuses(() => makeDistribution("sw", 1, { fanout: 4 }), /'sw' has no parameter 'fanout' \(it takes bins, smoothing\)/);
  refuses(() => makeDistribution("hh", 1, { smoothing: 1 }), /'hh' has no parameter 'smoothing' \(it takes bins, fanout\)/);
  assert.equal(makeDistribution("hh", 1, { bins: 27, fanout: 3 }).height, 3);
  assert.equal(makeDistribution("sw", 1).bins, 64);
});

const spec = (attributes, extra = {}) => JSON.stringify({ name: "dist", version: 1, epsilon: 2.0, attributes, ...extra });
const LATENCY = { name: "request_ms", type: "numeric", range: [0, 2000], mechanism: "sw", parameters: { bins: 64 } };
const NETWORK = { name: "network_type", type: "categorical", values: ["wifi", "5g", "4g", "3g", "offline"] };

test("a spec naming sw or hh loads the distribution module, and only it", () => {
  assert.deepEqual(needsOf(spec([LATENCY, NETWORK])),
                   { longitudinal: false, keyvalue: false, strings: false, factorization: false, distribution: true });
  assert.equal(needsOf(spec([{ ...LATENCY, mechanism: "pm", parameters: undefined }])).distribution, false);
  assert.ok(EVERY_MECHANISM.includes("sw") && EVERY_MECHANISM.includes("hh"));
});

test("examples/request_latency.yaml: sw at the full eps (sampling one), reports of {value: <f8} within its bound", () => {
  const collector = new Collector(parseSpec(spec([LATENCY, NETWORK], { sampling: "one", windows: ["1h"] })));
  assert.deepEqual(collector.resolved(), { request_ms: "sw", network_type: collector.resolved().network_type });
  const budgets = collector.privacyBudgets();
  assert.deepEqual(budgets.attributes.request_ms, { mechanism: "sw", one_report: 2.0, per_value: null, parameters: null });
  const mech = collector.plans[0].fresh;
  assert.equal(mech.bins, 64);
  const rng = new SeededRandom(11);
  let seen = 0;
  for (let i = 0; i < 400; i++) {
    const reports = collector.perturb({ request_ms: 1234.5, network_type: "wifi" }, rng, null);
    assert.equal(reports.length, 1);
    if (reports[0].attribute !== 0) continue;
    seen++;
    const { value } = reports[0].report;
    assert.equal(value.dtype, "<f8");
    assert.ok(Math.abs(value.values[0]) <= (1 + mech.window) / mech.scale);
  }
  assert.ok(seen > 150 && seen < 250, `sw sampled ${seen} times of 400`);
});

test("examples/diagnostics.yaml with numeric attributes switched to sw and hh: k sampled, each at eps / k", () => {
  const attributes = [
    { name: "battery_level", type: "numeric", range: [0, 100], mechanism: "sw" },
    { name: "battery_temperature", type: "numeric", range: [15, 50], mechanism: "hh", parameters: { bins: 16, fanout: 2 } },
    { name: "memory_used", type: "numeric", range: [0, 12288] },
    { name: "display_mode", type: "categorical", values: ["light", "dark"] },
  ];
  const collector = new Collector(parseSpec(spec(attributes, { epsilon: 6.0 })));
  assert.equal(collector.k, 2); // floor(6 / 2.5)
  const resolved = collector.resolved();
  assert.equal(resolved.battery_level, "sw");
  assert.equal(resolved.battery_temperature, "hh");
  const hh = collector.plans[1].fresh;
  assert.equal(hh.epsilon, 3.0);
  assert.equal(hh.height, 4);
  const rng = new SeededRandom(12);
  const record = { battery_level: 50, battery_temperature: 50, memory_used: 100, display_mode: "dark" };
  for (let i = 0; i < 200; i++) {
    for (const { attribute, report } of collector.perturb(record, rng, null)) {
      if (attribute !== 1) continue;
      assert.deepEqual(Object.keys(report).sort(), ["bit", "level", "row"]);
      assert.ok(report.level.values[0] >= 1 && report.level.values[0] <= 4 && report.row.values[0] < 16);
    }
  }
  // the top of the range falls in the last bin: with the bit kept, it is H[row, node of the last leaf]
  assert.deepEqual(hh.fromUniforms(1.0, [0.99, 0.99, 0.0]), { level: 4, row: 15, bit: hadamardBit(15, 15) });
});

test("specs the Python parser refuses are refused", () => {
  const refused = (attributes, pattern, extra = {}) =>
    assert.throws(() => parseSpec(spec(attributes, extra)), (e) => pattern.test(e.message));
  refused([{ ...LATENCY, parameters: { bins: 3 } }], /attribute 'request_ms': bins must be an integer in \[4, 1024\], got 3/);
  refused([{ ...LATENCY, mechanism: "hh", parameters: { bins: 60 } }], /bins must be a power of the fanout 4, got 60/);
  refused([{ ...LATENCY, parameters: { bins: 64, fanout: 4 } }], /'sw' has no parameter 'fanout'/);
  refused([{ ...LATENCY, mechanism: "pm" }], /parameters go with a named memoized mechanism \(.*\) or distribution mechanism \(hh, sw\), not 'pm'/);
  refused([{ ...NETWORK, mechanism: "sw" }], /unknown frequency oracle "sw"/);
  refused([LATENCY], /fresh noise per report/, { privacy: { per_report: 2.0, lifetime: 4.0 } });
  assert.equal(parseSpec(spec([{ ...LATENCY, mechanism: "hh", parameters: {} }])).attributes[0].mechanism, "hh");
});
