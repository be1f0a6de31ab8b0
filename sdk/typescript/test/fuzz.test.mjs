// The decoders of outside bytes, fuzzed: whatever the bytes, each returns or throws its own error, nothing else
// (no TypeError, RangeError or hang from a hostile pointer, spec, strategy, signature header or stored state).
import "../dist/mechanisms/all.js"; // every mechanism, statically
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

import { fromBase64, utf8 } from "../dist/bytes.js";
import { SignatureError, SpecError, TrustError } from "../dist/errors.js";
import { PrivacyLedger } from "../dist/ledger.js";
import { FactorizationMechanism } from "../dist/mechanisms/factorization.js";
import { Outbox } from "../dist/outbox.js";
import { PointerError, parsePointer } from "../dist/pointer.js";
import { blockFromHeader, trustedKeysFromJson } from "../dist/signatures.js";
import { parseSpec } from "../dist/spec.js";
import { DeviceState } from "../dist/state.js";
import { memoryStorage } from "../dist/storage.js";
import { checkPointer, checkSpec } from "../dist/trust.js";
import { generator } from "./fuzz_support.mjs";

const DIR = fileURLToPath(new URL("../../../tests/vectors/", import.meta.url));
const TRUST = JSON.parse(readFileSync(DIR + "trust.json", "utf8"));
const HASHES = JSON.parse(readFileSync(DIR + "hashes.json", "utf8"));
const KEYS = trustedKeysFromJson(TRUST.pinned_keys);

function mutations(seedBytes, count, seed) {
  const random = generator(seed);
  const out = [];
  for (let i = 0; i < count; i++) {
    const b = Uint8Array.from(seedBytes);
    const kind = Math.floor(random() * 4);
    if (kind === 0) for (let j = 0; j < 1 + random() * 4; j++) b[Math.floor(random() * b.length)] ^= 1 << Math.floor(random() * 8);
    if (kind === 1) out.push(b.subarray(0, Math.floor(random() * b.length)));
    if (kind === 2) out.push(Uint8Array.from({ length: Math.floor(random() * 300) }, () => Math.floor(random() * 256)));
    if (kind === 3) {
      const text = new TextDecoder().decode(b);
      const at = Math.floor(random() * text.length);
      out.push(utf8(text.slice(0, at) + ["{", "}", "[", "\"", "1e999", "-0", "null", "true", ",", "\\u0000"][Math.floor(random() * 10)] + text.slice(at)));
    }
    if (kind === 0) out.push(b);
  }
  return out;
}

const pointer = fromBase64(TRUST.pointers[0].pointer);
const spec = fromBase64(TRUST.specs[0].spec);

test("pointers: PointerError or a pointer, whatever the bytes", () => {
  for (const bytes of mutations(pointer, 3000, 1)) {
    try {
      parsePointer(bytes);
    } catch (exc) {
      assert.ok(exc instanceof PointerError, `${exc}`);
    }
  }
});

test("specs: SpecError or a spec, whatever the bytes", () => {
  for (const bytes of mutations(spec, 3000, 2)) {
    try {
      parseSpec(bytes);
    } catch (exc) {
      assert.ok(exc instanceof SpecError, `${exc}`);
    }
  }
});

test("trust checks: TrustError or a verdict, whatever the bytes and the signature", async () => {
  const block = fromBase64(TRUST.pointers[0].signature);
  const p = parsePointer(pointer);
  const random = generator(3);
  for (const bytes of mutations(pointer, 300, 4)) {
    const sig = random() < 0.5 ? block : mutations(block, 1, Math.floor(random() * 1e9))[0];
    await checkPointer(bytes, sig, KEYS, "diag", { version: 0, sequence: -1 }, TRUST.pointers[0].now_ms).catch((exc) => {
      assert.ok(exc instanceof TrustError, `${exc}`);
    });
    await checkSpec(bytes, sig, KEYS, p).catch((exc) => assert.ok(exc instanceof TrustError, `${exc}`));
  }
});

test("signature headers and pinned keys: their own errors only", () => {
  for (const text of ["", "=", "a", "####", "QUJD", " QUJD ", "QQ==", "QQ=", "\u00e9\u00e9\u00e9\u00e9"]) {
    try { blockFromHeader(text); } catch (exc) { assert.ok(exc instanceof SignatureError); }
  }
  for (const data of [null, 1, "x", [], {}, { keys: null }, { keys: [null] }, { keys: [{ role: "spec", public_key: 5 }] },
                      { keys: [{ role: "spec", public_key: "AAAA" }] }]) {
    assert.throws(() => trustedKeysFromJson(data), SignatureError);
  }
});

test("strategies: SpecError or a strategy, whatever the bytes", async () => {
  for (const c of HASHES.cases.filter((x) => x.kind === "strategy")) {
    for (const bytes of mutations(fromBase64(c.npz), 200, 5)) {
      await FactorizationMechanism.fromNpz(bytes, c.hash).catch((exc) => assert.ok(exc instanceof SpecError, `${exc}`));
    }
  }
});

test("stored state: a damaged ledger, device state or outbox is refused or dropped, never half-read", async () => {
  const ledger = new PrivacyLedger();
  for (const bytes of mutations(utf8(ledger.toJSON()), 500, 6)) {
    try {
      PrivacyLedger.fromJSON(new TextDecoder().decode(bytes));
    } catch (exc) {
      assert.ok(exc instanceof Error && exc.message.startsWith("not a privacy ledger"), `${exc}`);
    }
  }
  const state = JSON.stringify({ format: 1, collections: { diag: { credential: null, seen: [3, 5], pointer: null,
    pointer_block: null, pointer_etag: null, spec: "eyJ9", spec_block: null, verdict: null } } });
  for (const bytes of mutations(utf8(state), 500, 7)) {
    await DeviceState.open(memoryStorage({ device: new TextDecoder().decode(bytes) })).catch((exc) => {
      assert.equal(exc.name, "StateError", `${exc}`);
    });
  }
  const entries = JSON.stringify([{ v: 1, t: 5, m: 5, s: 40, a: [[0, [["value", "<f8", "AAAAAAAA8D8="]]]] }]);
  for (const bytes of mutations(utf8(entries), 500, 8)) {
    const outbox = await Outbox.open(memoryStorage({ "outbox/diag": new TextDecoder().decode(bytes) }), "diag");
    assert.ok(outbox.length <= 1);
  }
});
