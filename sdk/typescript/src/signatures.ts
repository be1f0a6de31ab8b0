/**
 * Ed25519 signature blocks over specs and pointers, checked against pinned keys (`ldpstream.contract.signatures`).
 *
 * A block is 72 bytes: the signer's key id (the first 8 bytes of the sha256 of its raw public key), then the
 * signature. A spec signature covers SPEC_DOMAIN, the length of "name@version" (4 bytes, big-endian), that key and
 * the spec's exact bytes; a pointer signature covers POINTER_DOMAIN and the pointer's exact bytes. Verification runs
 * on the raw bytes before anything in them is parsed, with WebCrypto's Ed25519 where the platform has it and
 * @noble/ed25519 (strict RFC 8032 rules) where it does not.
 */

import { concatBytes, fromBase64, toHex, utf8 } from "./bytes.js";
import { SignatureError } from "./errors.js";
import { sha256 } from "./hashes.js";

export const SPEC_DOMAIN = utf8("ldpstream collection spec signature v1\x00");
export const POINTER_DOMAIN = utf8("ldpstream collection pointer signature v1\x00");
const KEY_ID_BYTES = 8;
const SIGNATURE_BYTES = 64;
export const BLOCK_BYTES = KEY_ID_BYTES + SIGNATURE_BYTES;
const ROLES = ["spec", "pointer"] as const;
const MAX_PINNED = 16;

/** One role's pinned keys, by the hex of their key id. */
export type KeysById = ReadonlyMap<string, Uint8Array>;

/** The keys a device pins, by role. */
export interface TrustedKeys {
  readonly spec: KeysById;
  readonly pointer: KeysById;
}

/** What `ldp spec keys --json` prints: {"keys": [{role, status, id, public_key}]}. */
export interface PinnedKeysJson {
  keys: { role: string; status?: string; id?: string; public_key: string }[];
}

export function keyId(publicKey: Uint8Array): Uint8Array {
  return sha256(publicKey).subarray(0, KEY_ID_BYTES);
}

/** The pinned keys of `ldp spec keys --json`; SignatureError if it is not that, an id does not match its key, or a
 * role has no key (or more than 16). */
export function trustedKeysFromJson(data: unknown): TrustedKeys {
  if (typeof data !== "object" || data === null || !Array.isArray((data as { keys?: unknown }).keys)) {
    throw new SignatureError('pinned keys are {"keys": [...]} (`ldp spec keys --json`)');
  }
  const byRole = { spec: new Map<string, Uint8Array>(), pointer: new Map<string, Uint8Array>() };
  for (const entry of (data as { keys: unknown[] }).keys) {
    const e = entry as Record<string, unknown>;
    if (typeof e !== "object" || e === null || !ROLES.includes(e.role as "spec")) {
      throw new SignatureError(`a pinned key\'s role is spec or pointer: ${JSON.stringify(entry)?.slice(0, 80)}`);
    }
    const role = e.role as "spec" | "pointer";
    let raw: Uint8Array;
    try {
      if (typeof e.public_key !== "string") throw new Error();
      raw = fromBase64(e.public_key);
      if (raw.length !== 32) throw new Error();
    } catch {
      throw new SignatureError(`a pinned ${role} key is not a base64 Ed25519 public key`);
    }
    const id = toHex(keyId(raw));
    if (e.id !== undefined && e.id !== null && e.id !== id) {
      throw new SignatureError(`a pinned ${role} key's id ${String(e.id).slice(0, 20)} does not match it`);
    }
    byRole[role].set(id, raw);
  }
  for (const role of ROLES) {
    if (byRole[role].size === 0) throw new SignatureError(`no pinned ${role} key`);
    if (byRole[role].size > MAX_PINNED) {
      throw new SignatureError(`${byRole[role].size} pinned ${role} keys (at most ${MAX_PINNED})`);
    }
  }
  return byRole;
}

export function specMessage(key: Uint8Array, value: Uint8Array): Uint8Array {
  const length = new Uint8Array(4);
  new DataView(length.buffer).setUint32(0, key.length, false);
  return concatBytes(SPEC_DOMAIN, length, key, value);
}

export function pointerMessage(value: Uint8Array): Uint8Array {
  return concatBytes(POINTER_DOMAIN, value);
}

let webCryptoEd25519: boolean | undefined;

async function ed25519Verify(publicKey: Uint8Array, signature: Uint8Array, message: Uint8Array): Promise<boolean> {
  const subtle = (globalThis as { crypto?: Crypto }).crypto?.subtle;
  if (subtle !== undefined && webCryptoEd25519 !== false) {
    try {
      const key = await subtle.importKey("raw", publicKey as BufferSource, { name: "Ed25519" }, false, ["verify"]);
      webCryptoEd25519 = true;
      return await subtle.verify({ name: "Ed25519" }, key, signature as BufferSource, message as BufferSource);
    } catch (exc) {
      if (webCryptoEd25519 === true) return false; // the platform has Ed25519: these bytes are not a valid key
      webCryptoEd25519 = false; // no Ed25519 in this platform's WebCrypto: the library from now on
    }
  }
  try {
    const ed = await import("@noble/ed25519"); // loaded only on a platform whose WebCrypto lacks Ed25519
    return await ed.verifyAsync(signature, message, publicKey, { zip215: false });
  } catch {
    return false;
  }
}

/** Resolves if `block` is a signature of `message` by one of `keys`; rejects with SignatureError (its code says which
 * rule failed) otherwise, whatever the bytes. */
export async function verifyBlock(keys: KeysById, block: Uint8Array | null, message: Uint8Array,
                                  where: string): Promise<void> {
  if (block === null) throw new SignatureError(`${where}: unsigned (no signature)`, "unsigned");
  if (block.length !== BLOCK_BYTES) {
    throw new SignatureError(`${where}: malformed signature (${block.length} bytes, not ${BLOCK_BYTES})`, "malformed_signature");
  }
  const signer = toHex(block.subarray(0, KEY_ID_BYTES));
  const publicKey = keys.get(signer);
  if (publicKey === undefined) {
    throw new SignatureError(`${where}: signed by key ${signer}, which is not pinned`, "untrusted_key");
  }
  if (!(await ed25519Verify(publicKey, block.slice(KEY_ID_BYTES), message))) {
    throw new SignatureError(`${where}: bad signature by key ${signer}`, "bad_signature");
  }
}

/** The signature block of an `LDP-Signature` header (null if absent); SignatureError if it is not base64. */
export function blockFromHeader(value: string | null): Uint8Array | null {
  if (value === null) return null;
  try {
    return fromBase64(value.trim());
  } catch {
    throw new SignatureError("the LDP-Signature header is not base64", "malformed_signature");
  }
}
