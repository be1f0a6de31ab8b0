// The browser bundle: dist/index.js and its dependencies as one minified ES module (dist/browser/ldpstream-device.js),
// for pages that load the SDK without a bundler of their own (examples/web/). Prints its size, min and min+gzip.
import { build } from "esbuild";
import { gzipSync } from "node:zlib";
import { readFileSync } from "node:fs";

const outfile = "dist/browser/ldpstream-device.js";
await build({
  entryPoints: ["dist/index.js"], bundle: true, format: "esm", minify: true, platform: "browser", target: "es2022",
  outfile, external: ["node:*"], legalComments: "eof", logLevel: "warning",
});
const code = readFileSync(outfile);
const sizes = { bundle: outfile, min_bytes: code.length, min_gzip_bytes: gzipSync(code, { level: 9 }).length };
console.log(JSON.stringify(sizes));
