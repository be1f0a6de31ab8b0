import { build } from "esbuild";
import { gzipSync } from "node:zlib";
const dir = process.argv[2] ?? "dist";
const r = await build({ entryPoints: { e: `${dir}/index.js` }, bundle: true, splitting: true, format: "esm", minify: true,
  platform: "browser", target: "es2022", outdir: "/tmp/tsdag/expout", chunkNames: "chunks/[name]-[hash]", external: ["node:*"],
  legalComments: "eof", logLevel: "error", metafile: true, write: false });
const files = Object.fromEntries(r.outputFiles.map((f) => [f.path.replace(/.*expout\//, ""), f.contents]));
const statics = ["e.js"];
for (const f of statics) for (const i of r.metafile.outputs["../../../../../tmp/tsdag/expout/" + f].imports)
  if (i.kind === "import-statement") { const p = i.path.replace(/.*expout\//, ""); if (!statics.includes(p)) statics.push(p); }
let gz = 0, min = 0;
for (const f of statics) { min += files[f].length; gz += gzipSync(files[f], { level: 9 }).length; }
console.log(dir, "core", min, gz, statics.join(" "));
