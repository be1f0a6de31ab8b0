// The example training page (docs/tutorials/train-on-devices.md). Its settings come from the query string (edge, job,
// token) and from ../web/keys.json (what `ldp spec keys --json` prints), or all from ./config.json. The examples are
// the user's own drawings (28 x 28 grey levels in [0, 1], as Fashion-MNIST's) with a label; with ?auto=1 the page
// trains once on three fixed pseudo-random rows and sends the update without a click (what the browser test drives).
import { SpecRefused, TrainingDevice } from "../../sdk/typescript/dist/browser/ldpstream-training.js";

const CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"];
const status = document.getElementById("status");
const facts = document.getElementById("facts");
const pad = document.getElementById("pad");
const ink = pad.getContext("2d", { willReadFrequently: true });
const examples = [];

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
    const keys = await fetch("../web/keys.json", { cache: "no-store" });
    if (!keys.ok) throw new Error("no keys: run `ldp spec keys --json > examples/web/keys.json`");
    config.trustedKeys = await keys.json();
  }
  return {
    edge: query.get("edge") ?? config.edge ?? "http://127.0.0.1:8080",
    job: query.get("job") ?? config.job ?? "fashion-softmax",
    token: query.get("token") ?? config.token ?? null,
    trustedKeys: config.trustedKeys,
    auto: query.get("auto") === "1",
  };
}

/** The drawing as 784 grey levels in [0, 1] (the canvas averaged over 10 x 10 blocks). */
function drawing() {
  const { data } = ink.getImageData(0, 0, 280, 280);
  const features = new Float32Array(784);
  for (let y = 0; y < 280; y++) {
    for (let x = 0; x < 280; x++) features[Math.floor(y / 10) * 28 + Math.floor(x / 10)] += data[4 * (280 * y + x) + 3] / 255 / 100;
  }
  return features;
}

function wirePad() {
  let down = false;
  ink.lineWidth = 22;
  ink.lineCap = "round";
  pad.addEventListener("pointerdown", (e) => { down = true; ink.beginPath(); ink.moveTo(e.offsetX, e.offsetY); });
  pad.addEventListener("pointermove", (e) => { if (down) { ink.lineTo(e.offsetX, e.offsetY); ink.stroke(); } });
  addEventListener("pointerup", () => { down = false; });
  document.getElementById("clear").onclick = () => ink.clearRect(0, 0, 280, 280);
  const label = document.getElementById("label");
  CLASSES.forEach((name, i) => label.append(new Option(name, String(i))));
  document.getElementById("add").onclick = () => {
    examples.push({ features: drawing(), label: Number(label.value) });
    ink.clearRect(0, 0, 280, 280);
    facts.textContent = `${examples.length} example(s) kept in this tab`;
  };
}

async function trainOnce(device, rows) {
  show("working", "fetching and verifying the current model version, computing the update…");
  const update = await device.train(rows);
  if (update === null) {
    show("sent", "already sent an update for this model version: wait for the next one");
    return;
  }
  const sent = await device.flush();
  const stats = device.stats();
  show("sent", `update of ${update.length} bytes made and charged (epsilon ${device.spec.epsilon}); ` +
               `${sent} taken by the edge; pending ${stats.pending}`);
  facts.textContent = `spent on this job: ${device.ledger.lifetimeSpent(device.key)} of ` +
                      `${device.spec.epsilon * device.spec.max_rounds} (epsilon x max_rounds)`;
}

async function main() {
  const s = await settings();
  let device;
  try {
    device = await TrainingDevice.join({ edge: s.edge, job: s.job, token: s.token, trustedKeys: s.trustedKeys });
  } catch (exc) {
    show(exc instanceof SpecRefused ? "refused" : "error", `${exc.name}: ${exc.message}`);
    return;
  }
  const { model, epsilon, mechanism } = device.spec;
  show("joined", `joined job '${s.job}': ${model.architecture} ${model.dims.join("-")}, ${mechanism.name} at epsilon ${epsilon}`);
  if (s.auto) {
    let seed = 7;
    const next = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
    const rows = [0, 1, 2].map((i) => ({ features: Float32Array.from({ length: model.dims[0] }, next), label: i % model.dims.at(-1) }));
    await trainOnce(device, rows).catch((exc) => show("error", `${exc.name}: ${exc.message}`));
    window.trained = status.dataset.state;
    return;
  }
  wirePad();
  document.getElementById("add").disabled = false;
  const train = document.getElementById("train");
  train.disabled = false;
  train.onclick = async () => {
    if (!examples.length) return show("error", "draw and keep at least one example first");
    train.disabled = true;
    await trainOnce(device, examples).catch((exc) => show(exc instanceof SpecRefused ? "refused" : "error", `${exc.name}: ${exc.message}`));
    train.disabled = false;
  };
}

main().catch((exc) => show("error", `${exc.name}: ${exc.message}`));
