// Reports perturbed (and encoded) per second by the TypeScript SDK, one mechanism after another, in Node or (the same
// code, `runBench`) in a browser page. node perturb.mjs JOBS.json -> JSON {name: reports_per_s}.
// JOBS: [{"name", "spec" (JSON text), "records": [record, ...], "strategy": {"hash", "npz"} | null}]

export async function runBench(sdk, jobs, seconds = 0.4) {
  const { Collector, CryptoRandom, parseSpec, fromBase64, strategyFromNpz, encodeEnvelope, columnBytes, loadMechanisms,
          needsOf } = sdk;
  const out = {};
  const rng = new CryptoRandom();
  for (const job of jobs) {
    await loadMechanisms(needsOf(job.spec)); // what the spec names, on demand (as a device does)
    const spec = parseSpec(job.spec);
    const strategies = new Map();
    if (job.strategy) strategies.set(job.strategy.hash, await strategyFromNpz(fromBase64(job.strategy.npz), job.strategy.hash));
    const collector = new Collector(spec, strategies);
    const secret = spec.privacy === null ? null : rng.word64();
    const one = (record) => encodeEnvelope({
      collection: spec.name, specVersion: spec.version, devices: [1n], timestampsMs: [1_795_788_000_000],
      blocks: collector.perturb(record, rng, secret).map((b) => ({ attribute: b.attribute, rows: [0],
        columns: Object.entries(b.report).map(([name, c]) => ({ name, dtype: c.dtype, data: columnBytes(c) })) })),
    });
    for (let i = 0; i < 200; i++) one(job.records[i % job.records.length]); // warm up
    let done = 0;
    const start = performance.now();
    while (performance.now() - start < seconds * 1000) {
      for (let i = 0; i < 50; i++) one(job.records[(done + i) % job.records.length]);
      done += 50;
    }
    out[job.name] = Math.round(done / ((performance.now() - start) / 1000));
  }
  return out;
}

if (typeof process !== "undefined" && process.argv[1]?.endsWith("perturb.mjs")) {
  const { readFileSync } = await import("node:fs");
  const dist = new URL("../../sdk/typescript/dist/", import.meta.url);
  const sdk = await import(new URL("index.js", dist));
  console.log(JSON.stringify(await runBench(sdk, JSON.parse(readFileSync(process.argv[2], "utf8")))));
}
