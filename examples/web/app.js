// The example device page (README, "Report from a web page"). Its settings come from the query string (edge,
// collection, token) and from ./keys.json (what `ldp spec keys --json` prints), or all from ./config.json.
// With ?auto=1 it joins, reports one record and sends it without a click (what the browser test drives).
import { BudgetExceeded, Device, SpecRefused } from "../../sdk/typescript/dist/browser/ldpstream-device.js";

const status = document.getElementById("status");
const facts = document.getElementById("facts");
const fields = document.getElementById("fields");

function show(state, text) {
  status.dataset.state = state;
  status.textContent = text;
}

async function settings() {
  const query = new URLSearchParams(location.search);
  let config = {};
  const file = await fetch("./config.json", { cache: "no-store" });
  if (file.ok) config = await file.json();
  if (!config.trustedKeys) {
    const keys = await fetch("./keys.json", { cache: "no-store" });
    if (!keys.ok) throw new Error("no keys.json next to this page: run `ldp spec keys --json > examples/web/keys.json`");
    config.trustedKeys = await keys.json();
  }
  return {
    edge: query.get("edge") ?? config.edge ?? "http://127.0.0.1:8080",
    collection: query.get("collection") ?? config.collection ?? "diagnostics",
    token: query.get("token") ?? config.token ?? null,
    trustedKeys: config.trustedKeys,
    auto: query.get("auto") === "1",
  };
}

/** One input per attribute of the spec: a slider for a number, a list for a category. */
function form(spec) {
  fields.replaceChildren();
  for (const a of spec.attributes) {
    const label = document.createElement("label");
    label.append(a.name);
    let input;
    if (a.type === "numeric") {
      input = Object.assign(document.createElement("input"), { type: "range", min: a.range[0], max: a.range[1],
        step: "any", value: (a.range[0] + a.range[1]) / 2 });
    } else if (a.type === "categorical") {
      input = document.createElement("select");
      for (const v of a.values) input.append(new Option(v, v));
    } else {
      input = Object.assign(document.createElement("input"), { type: "text", value: a.type === "string" ? "example" : "{}" });
    }
    input.name = a.name;
    const out = document.createElement("output");
    if (a.type === "numeric") {
      out.value = Number(input.value).toFixed(0);
      input.addEventListener("input", () => { out.value = Number(input.value).toFixed(0); });
    }
    label.append(input, out);
    fields.append(label);
  }
}

function record(spec) {
  const data = new FormData(document.getElementById("record"));
  return Object.fromEntries(spec.attributes.map((a) => {
    const raw = data.get(a.name);
    if (a.type === "numeric") return [a.name, Number(raw)];
    if (a.type === "keyvalue") return [a.name, JSON.parse(raw)];
    return [a.name, raw];
  }));
}

function describe(device) {
  const spent = device.ledger.spent(device.spec, Date.now());
  facts.textContent = `collection ${device.spec.name}@${device.spec.version} · epsilon ${device.spec.epsilon} per report · `
    + `spent ${spent} in this window, ${device.ledger.lifetimeSpent(device.spec.name)} in all · `
    + `${device.pending} report(s) waiting · pseudonym ${device.pseudonym}`;
  document.body.dataset.pseudonym = String(device.pseudonym);
  document.body.dataset.spent = String(spent);
  document.body.dataset.pending = String(device.pending);
}

async function main() {
  const config = await settings();
  let device;
  try {
    device = await Device.join(config);
  } catch (exc) {
    show(exc instanceof SpecRefused ? "refused" : "error",
         exc instanceof SpecRefused ? `this device refuses the collection's spec (${exc.code}): ${exc.message}`
                                    : `could not join: ${exc.name}: ${exc.message}`);
    return;
  }
  window.ldpDevice = device;
  form(device.spec);
  describe(device);
  show("joined", `joined ${config.collection}: the spec is signed by a pinned key and within this app's privacy policy`);
  const report = document.getElementById("report"), flush = document.getElementById("flush");
  report.disabled = flush.disabled = false;

  async function reportOnce() {
    try {
      await device.report(record(device.spec));
      show("reported", "perturbed and queued (its budget is charged now)");
    } catch (exc) {
      show(exc instanceof BudgetExceeded ? "budget" : "error", `${exc.name}: ${exc.message}`);
    }
    describe(device);
  }
  async function send() {
    const sent = await device.flush();
    show(sent ? "sent" : "kept", sent ? `sent ${sent} report(s) to the edge` : `nothing sent (${device.pending} waiting)`);
    describe(device);
    return sent;
  }
  document.getElementById("record").addEventListener("submit", (event) => {
    event.preventDefault();
    reportOnce();
  });
  flush.addEventListener("click", send);
  if (config.auto) {
    await reportOnce();
    if (status.dataset.state === "reported") await send();
  }
}

main().catch((exc) => show("error", `${exc.name}: ${exc.message}`));
