// The training-update benchmark (train.mjs) in Debian's Chromium, headless: the SDK's training bundle
// (dist/browser/ldpstream-training.js) and the benchmark served to the page by request interception (no server, no
// network). node train_browser.mjs CASES.json -> JSON.
import { readFileSync, mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

const require = createRequire(new URL("../../sdk/typescript/package.json", import.meta.url));
const { chromium } = require("playwright-core");
const cases = readFileSync(process.argv[2], "utf8");
const files = {
  "/training.js": readFileSync(new URL("../../sdk/typescript/dist/browser/ldpstream-training.js", import.meta.url), "utf8"),
  "/bench.js": readFileSync(new URL("./train.mjs", import.meta.url), "utf8"), "/cases.json": cases,
  "/index.html": `<!doctype html><script type="module">
    import * as training from "./training.js"; import { runTrainBench } from "./bench.js";
    window.result = await runTrainBench(training, await (await fetch("./cases.json")).json());</script>`,
};
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const profile = mkdtempSync(join(tmpdir(), "ldp-bench-"));
const context = await chromium.launchPersistentContext(profile, { executablePath: "/usr/bin/chromium", headless: true, args: FLAGS });
try {
  const page = await context.newPage();
  await page.route("http://bench.invalid/**", (route) => {
    const path = new URL(route.request().url()).pathname;
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
