// A real headless Chromium (Debian's, driven by playwright-core; no browser download) loads the example page,
// which joins, reports and sends; then reloads it, and the page must come back as the same device with its budget
// still spent. node browser.mjs URL ARTIFACTS_DIR  -> prints the states seen as JSON; screenshots in ARTIFACTS_DIR.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { createRequire } from "node:module";

// playwright-core is a development dependency of the SDK (sdk/typescript/node_modules)
const require = createRequire(new URL("../../sdk/typescript/package.json", import.meta.url));
const { chromium } = require("playwright-core");

const [url, artifacts] = process.argv.slice(2);
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const profile = mkdtempSync(join(tmpdir(), "ldp-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true, args: FLAGS,
  viewport: { width: 900, height: 800 },
});
const console_ = [];
const settled = '#status[data-state="sent"], #status[data-state="kept"], #status[data-state="error"], '
  + '#status[data-state="refused"], #status[data-state="budget"]';

async function visit(page, name) {
  await page.waitForSelector(settled, { timeout: 90_000 });
  const seen = await page.evaluate(() => ({
    state: document.getElementById("status").dataset.state, text: document.getElementById("status").textContent,
    pseudonym: document.body.dataset.pseudonym ?? null, spent: document.body.dataset.spent ?? null,
    pending: document.body.dataset.pending ?? null,
  }));
  // the memo table is the ledger's secret (kept in IndexedDB): its digest, never the secret itself, and the memos paid
  seen.memo = await page.evaluate(async () => {
    const db = await new Promise((resolve, reject) => {
      const open = indexedDB.open("ldpstream-device");
      open.onsuccess = () => resolve(open.result);
      open.onerror = () => reject(open.error);
    });
    const text = await new Promise((resolve) => {
      const get = db.transaction("state").objectStore("state").get("ledger");
      get.onsuccess = () => resolve(get.result);
    });
    db.close();
    const ledger = JSON.parse(text);
    const [name, account] = Object.entries(ledger.collections)[0];
    const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(account.secret ?? ""));
    return { collection: name, secret_sha256: [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join(""),
             memos: Object.keys(account.memos).sort(), lifetime_spent: account.lifetime_spent };
  });
  await page.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true });
  return seen;
}

try {
  const page = await context.newPage();
  page.on("console", (m) => console_.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => console_.push(`pageerror: ${e.message}`));
  await page.goto(url);
  const first = await visit(page, "browser-first-visit");
  await page.reload();
  const reloaded = await visit(page, "browser-after-reload");
  console.log(JSON.stringify({ first, reloaded, console: console_.slice(-20) }));
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
