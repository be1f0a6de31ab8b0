// Device time per training update (protocol section 13.5: mean gradient of the device's examples, clip, perturb,
// encode), by the TypeScript SDK: `runTrainBench(training, cases)` runs in Node (node train.mjs CASES.json -> JSON)
// and in a page (train_browser.mjs). Each case: {name, architecture, dims, mechanism {name, p, q[, k]}, examples,
// updates}; the model's parameters and the examples are pseudo-random (fixed), the noise from crypto.getRandomValues.
export async function runTrainBench(training, cases) {
  const out = {};
  for (const c of cases) {
    const spec = training.parseJob(new TextEncoder().encode(JSON.stringify({
      job_id: "bench", version: 1, model: { architecture: c.architecture, dims: c.dims }, parameters: c.parameters,
      mechanism: c.mechanism, clip: 1.0, epsilon: c.epsilon, max_rounds: 1, batch_size: 1, max_versions: 1, lr: 1,
      version_validity_s: 3600, max_examples: c.examples,
    })));
    let s = 12345;
    const next = () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648);
    const theta = Float64Array.from({ length: spec.parameters }, () => (next() - 0.5) * 0.1);
    const examples = Array.from({ length: c.examples }, () => ({
      features: Float32Array.from({ length: c.dims[0] }, () => (next() < 0.5 ? 0 : next())), label: Math.floor(next() * c.dims.at(-1)),
    }));
    const rng = new training.CryptoRandom();
    training.computeUpdate(spec, 0, theta, examples, rng); // warm-up (the JIT, projunit's first projection)
    const ms = [];
    let bytes = 0;
    for (let i = 0; i < c.updates; i++) {
      const t0 = performance.now();
      bytes = training.computeUpdate(spec, i, theta, examples, rng).length;
      ms.push(performance.now() - t0);
    }
    ms.sort((a, b) => a - b);
    out[c.name] = { median_ms: ms[ms.length >> 1], min_ms: ms[0], updates: c.updates, update_bytes: bytes };
  }
  return out;
}

if (typeof process !== "undefined" && process.argv?.[1]?.endsWith("train.mjs")) {
  const { readFileSync } = await import("node:fs");
  const training = await import("../../sdk/typescript/dist/training/index.js");
  console.log(JSON.stringify(await runTrainBench(training, JSON.parse(readFileSync(process.argv[2], "utf8")))));
}
