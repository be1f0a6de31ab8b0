// Debian's headless Chromium (playwright-core) loads the example training page (examples/web-train/?auto=1), which
// joins the job, trains once and sends its update; prints the page's final status as JSON and keeps a screenshot.
// node browser_train.mjs URL ARTIFACTS_DIR
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

const require = createRequire(new URL("../../sdk/typescript/package.json", import.meta.url));
const { chromium } = require("playwright-core");
const [url, artifacts] = process.argv.slice(2);
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const profile = mkdtempSync(join(tmpdir(), "ldp-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true, args: FLAGS, viewport: { width: 900, height: 800 },
});
try {
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForSelector('#status[data-state="sent"], #status[data-state="error"], #status[data-state="refused"]', { timeout: 120_000 });
  await page.screenshot({ path: join(artifacts, "browser-train.png") });
  console.log(JSON.stringify(await page.evaluate(() => ({
    state: document.getElementById("status").dataset.state, text: document.getElementById("status").textContent,
    facts: document.getElementById("facts").textContent,
  })).then((seen) => ({ ...seen, errors }))));
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
