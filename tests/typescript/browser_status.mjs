// A real headless Chromium (Debian's, driven by playwright-core) loads a page of examples/web/ once and prints the
// state its status settles in, as JSON. node browser_status.mjs URL
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { createRequire } from "node:module";

const require = createRequire(new URL("../../sdk/typescript/package.json", import.meta.url));
const { chromium } = require("playwright-core");

const [url] = process.argv.slice(2);
const profile = mkdtempSync(join(tmpdir(), "ldp-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
});
try {
  const page = await context.newPage();
  await page.goto(url);
  await page.waitForSelector('#status:not([data-state="starting"])', { timeout: 90_000 });
  console.log(JSON.stringify(await page.evaluate(() => ({
    state: document.getElementById("status").dataset.state, text: document.getElementById("status").textContent,
  }))));
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
