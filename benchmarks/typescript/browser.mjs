// The perturbation benchmark (perturb.mjs) in Debian's Chromium, headless: the SDK's browser bundle and the
// benchmark served to the page by request interception (no server, no network). node browser.mjs JOBS.json -> JSON.
import { readFileSync, mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

const require = createRequire(new URL("../../sdk/typescript/package.json", import.meta.url));
const { chromium } = require("playwright-core");
const jobs = readFileSync(process.argv[2], "utf8");
const dist = new URL("../../sdk/typescript/dist/browser/", import.meta.url); // the core and its chunks
const bench = readFileSync(new URL("./perturb.mjs", import.meta.url), "utf8");
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const profile = mkdtempSync(join(tmpdir(), "ldp-bench-"));
const context = await chromium.launchPersistentContext(profile, { executablePath: "/usr/bin/chromium", headless: true, args: FLAGS });
try {
  const page = await context.newPage();
  const files = {
    "/bench.js": bench, "/jobs.json": jobs,
    "/index.html": `<!doctype html><script type="module">
      import * as sdk from "./sdk/ldpstream-device.js"; import { runBench } from "./bench.js";
      const jobs = await (await fetch("./jobs.json")).json();
      window.result = await runBench(sdk, jobs);</script>`,
  };
  await page.route("http://bench.invalid/**", (route) => {
    const path = new URL(route.request().url()).pathname;
    if (path.startsWith("/sdk/") && !path.includes("..")) {
      return route.fulfill({ status: 200, contentType: "text/javascript", body: readFileSync(new URL(path.slice(5), dist), "utf8") });
    }
    const type = path.endsWith(".html") ? "text/html" : path.endsWith(".json") ? "application/json" : "text/javascript";
    return files[path] === undefined ? route.abort() : route.fulfill({ status: 200, contentType: type, body: files[path] });
  });
  await page.goto("http://bench.invalid/index.html");
  await page.waitForFunction(() => window.result !== undefined, null, { timeout: 300_000 });
  console.log(JSON.stringify(await page.evaluate(() => window.result)));
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
