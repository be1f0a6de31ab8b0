// The browser bundle: dist/index.js and its dependencies as minified ES modules in dist/browser/: the core
// (ldpstream-device.js and the chunk it imports: join, trust, policy, ledger, outbox, wire, the numeric mechanisms and
// frequency oracles) and chunks the core imports on demand (the memoized, key-value, heavy-hitter, factorization and
// distribution mechanisms, and @noble/ed25519 for a platform whose WebCrypto lacks Ed25519), for pages that load the
// SDK without a bundler of their own (examples/web/). The core is two files because the sources have no import cycle
// (README, "Layers"): what the on-demand mechanisms share with the core (mechanisms/shared.ts says what) is one chunk,
// and the rest of the core is the entry file. Licence comments stay at the end of their file (only @noble/ed25519's
// chunk has one). Prints the sizes, minified and minified+gzipped: the core's (every file the entry imports
// statically, directly or not), every file's together, and the training bundle's
// (ldpstream-training.js: its own entry point, outside the core).
import { build } from "esbuild";
import { gzipSync } from "node:zlib";
import { readFileSync, rmSync } from "node:fs";

const outdir = "dist/browser";
rmSync(outdir, { recursive: true, force: true });
const result = await build({
  entryPoints: { "ldpstream-device": "dist/index.js" }, bundle: true, splitting: true, format: "esm", minify: true,
  platform: "browser", target: "es2022", outdir, chunkNames: "chunks/[name]-[hash]", external: ["node:*"],
  legalComments: "eof", logLevel: "warning", metafile: true,
});
const size = (file) => {
  const code = readFileSync(file);
  return [code.length, gzipSync(code, { level: 9 }).length];
};
const entry = `${outdir}/ldpstream-device.js`;
const statics = [entry]; // the entry file and every chunk it imports statically, directly or through another
for (const file of statics) {
  for (const i of result.metafile.outputs[file].imports) if (i.kind === "import-statement" && !statics.includes(i.path)) statics.push(i.path);
}
const files = Object.keys(result.metafile.outputs).filter((f) => f.endsWith(".js"));
const sum = (list) => list.map(size).reduce((a, b) => [a[0] + b[0], a[1] + b[1]], [0, 0]);
const [coreMin, coreGzip] = sum(statics);
const [allMin, allGzip] = sum(files);
// Training (dist/training/index.js) as one self-contained file beside them, for pages that train: built apart so
// that it never moves a byte of the core's chunks.
const training = `${outdir}/ldpstream-training.js`;
await build({ entryPoints: ["dist/training/index.js"], bundle: true, format: "esm", minify: true, platform: "browser",
              target: "es2022", outfile: training, external: ["node:*"], legalComments: "eof", logLevel: "warning" });
const [trainingMin, trainingGzip] = size(training);
console.log(JSON.stringify({ bundle: entry, core_min_bytes: coreMin, core_min_gzip_bytes: coreGzip,
                             all_files: files.length, all_min_bytes: allMin, all_min_gzip_bytes: allGzip,
                             training_min_bytes: trainingMin, training_min_gzip_bytes: trainingGzip }));
