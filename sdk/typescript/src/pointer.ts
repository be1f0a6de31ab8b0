/**
 * The signed pointer to a collection's current spec version (`ldpstream.contract.pointer`): canonical JSON of exactly
 * {collection, content_hash, expires_ms, issued_ms, sequence, version}, at most 1024 bytes, parsed only after its
 * signature verified.
 */

import { fromUtf8 } from "./bytes.js";
import { NAME } from "./spec.js";

export const MAX_POINTER_BYTES = 1024;
export const POINTER_PERIOD_MS = 3_600_000;
/** The longest validity a device accepts (the protocol's bound); how far a server's time may be ahead of the device's
 * clock (`ldpstream.contract.validation.MAX_FUTURE_SKEW_MS`). Generated from the Python contract (rules.ts). */
export { MAX_POINTER_VALIDITY_MS, MAX_SKEW_MS } from "./rules.js";
const FIELDS = ["collection", "content_hash", "expires_ms", "issued_ms", "sequence", "version"];
const HASH = /^[0-9a-f]{64}$/;

export class PointerError extends Error {
  override name = "PointerError";
}

export interface Pointer {
  readonly collection: string;
  readonly version: number;
  readonly content_hash: string;
  readonly issued_ms: number;
  readonly expires_ms: number;
  readonly sequence: number;
}

export function pointerExpired(pointer: Pointer, nowMs: number): boolean {
  return nowMs >= pointer.expires_ms;
}

/** True if the pointer is (version, sequence) or later. */
export function pointerNewerThan(pointer: Pointer, version: number, sequence: number): boolean {
  return pointer.version > version || (pointer.version === version && pointer.sequence >= sequence);
}

const MAX_LITERAL = 2n ** 53n;

/** Whether every number a JSON text gives `field` (its value, or the items of its list value, at each occurrence)
 * is an integer literal of magnitude at most 2^53: JSON.parse reads `1.0` and `1e0` as 1 and rounds 2^53 + 1 to
 * 2^53, where Python's json reads a float and msgspec refuses it for an int, or reads the integer exactly. */
export function isWholeLiteral(text: string, field: string): boolean {
  for (const match of text.matchAll(new RegExp(`(?<!\\\\)"${field}"\\s*:\\s*(\\[[^\\]]*\\]|-?[0-9][0-9.eE+-]*)`, "g"))) {
    const items = match[1].startsWith("[") ? match[1].slice(1, -1).split(",").map((item) => item.trim()) : [match[1]];
    for (const item of items.filter((x) => /^-?[0-9]/.test(x))) {
      if (!/^-?[0-9]+$/.test(item) || (item.startsWith("-") ? -BigInt(item) : BigInt(item)) > MAX_LITERAL) return false;
    }
  }
  return true;
}

/** The pointer in `data` (bytes whose signature verified); PointerError whatever else they are. */
export function parsePointer(data: Uint8Array): Pointer {
  if (data.length > MAX_POINTER_BYTES) throw new PointerError(`a pointer is at most ${MAX_POINTER_BYTES} bytes`);
  let text: string;
  let value: unknown;
  try {
    text = fromUtf8(data);
    value = JSON.parse(text);
  } catch {
    throw new PointerError("a pointer is JSON");
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)
      || Object.keys(value).sort().join() !== FIELDS.join()) {
    throw new PointerError(`a pointer is an object with exactly the fields ${FIELDS.join(", ")}`);
  }
  const v = value as Record<string, unknown>;
  if (typeof v.collection !== "string" || !NAME.test(v.collection)) {
    throw new PointerError("the pointer's collection is not a name");
  }
  if (typeof v.content_hash !== "string" || !HASH.test(v.content_hash)) {
    throw new PointerError("the pointer's content_hash is not 64 hex digits");
  }
  for (const field of FIELDS.slice(2)) { // expires_ms, issued_ms, sequence, version
    const n = v[field];
    if (typeof n !== "number" || !Number.isInteger(n) || n < 0 || n >= 2 ** 53 || !isWholeLiteral(text, field)) {
      throw new PointerError(`the pointer's ${field} is not a whole number in [0, 2^53)`);
    }
  }
  const pointer = v as unknown as Pointer;
  if (pointer.version < 1 || pointer.expires_ms <= pointer.issued_ms) {
    throw new PointerError("the pointer's version is below 1, or it expires before it is issued");
  }
  return {
    collection: pointer.collection, version: pointer.version, content_hash: pointer.content_hash,
    issued_ms: pointer.issued_ms, expires_ms: pointer.expires_ms, sequence: pointer.sequence,
  };
}
