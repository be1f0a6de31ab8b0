import { transformSync } from "esbuild";
import { gzipSync } from "node:zlib";
import { readFileSync } from "node:fs";
// estimate: minify a snippet of a dist file (lines a..b) standalone
const [file, a, b] = process.argv.slice(2);
const lines = readFileSync(file, "utf8").split("\n").slice(Number(a) - 1, Number(b)).join("\n");
const out = transformSync(lines, { minify: true, loader: "js", format: "esm" }).code;
console.log(file, a, b, out.length, gzipSync(out, { level: 9 }).length);
