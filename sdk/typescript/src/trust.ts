/**
 * What a device believes about a collection (`ldpstream.device.trust`): a pointer and a spec are checked in this
 * order, and refused at the first rule broken (`TrustError.code`, as the test vectors name them):
 *
 * pointer: its signature over the exact bytes by a pinned pointer key (unsigned, malformed_signature, untrusted_key,
 * bad_signature), then parsing (malformed_pointer), wrong_collection, issued_in_future (after the clock and the skew),
 * too_long (valid longer than MAX_POINTER_VALIDITY_MS), rollback (below the (version, sequence) accepted) and expired;
 * spec: its signature bound to "name@version" of the pointer by a pinned spec key, then hash_mismatch (not the bytes the
 * pointer names), parsing (malformed_spec), wrong_version.
 */

import { utf8 } from "./bytes.js";
import { SignatureError, SpecError, TrustError } from "./errors.js";
import { sha256Hex } from "./hashes.js";
import { loadMechanisms, needsOf } from "./mechanisms/optional.js";
import { MAX_POINTER_VALIDITY_MS, MAX_SKEW_MS, type Pointer, PointerError, parsePointer, pointerExpired,
  pointerNewerThan } from "./pointer.js";
import { pointerMessage, specMessage, type TrustedKeys, verifyBlock } from "./signatures.js";
import { type CollectionSpec, parseSpec, specKey } from "./spec.js";

/** The newest pointer a device accepted for a collection: it refuses anything older. */
export interface Seen {
  version: number;
  sequence: number;
}

/** `check`'s SignatureError as a TrustError of the same code. */
export async function signed(check: () => Promise<void>): Promise<void> {
  try {
    await check();
  } catch (exc) {
    if (exc instanceof SignatureError) throw new TrustError(exc.code, exc.message);
    throw exc;
  }
}

export async function checkPointer(data: Uint8Array, block: Uint8Array | null, keys: TrustedKeys, collection: string,
                                   seen: Seen, nowMs: number): Promise<Pointer> {
  await signed(() => verifyBlock(keys.pointer, block, pointerMessage(data), `pointer of '${collection}'`));
  let pointer: Pointer;
  try {
    pointer = parsePointer(data);
  } catch (exc) {
    if (exc instanceof PointerError) throw new TrustError("malformed_pointer", exc.message);
    throw exc;
  }
  if (pointer.collection !== collection) {
    throw new TrustError("wrong_collection", `a pointer for '${pointer.collection}', not '${collection}'`);
  }
  if (pointer.issued_ms > nowMs + MAX_SKEW_MS) {
    throw new TrustError("issued_in_future", `the pointer is issued after the clock (${nowMs} ms)`);
  }
  if (pointer.expires_ms - pointer.issued_ms > MAX_POINTER_VALIDITY_MS) {
    throw new TrustError("too_long", "the pointer is valid for more than 7 days");
  }
  if (!pointerNewerThan(pointer, seen.version, seen.sequence)) {
    throw new TrustError("rollback", `pointer (${pointer.version}, ${pointer.sequence}) is older than (${seen.version}, ${seen.sequence}) accepted`);
  }
  if (pointerExpired(pointer, nowMs)) {
    throw new TrustError("expired", `the pointer expired at ${pointer.expires_ms} ms (now ${nowMs} ms)`);
  }
  return pointer;
}

export async function checkSpec(data: Uint8Array, block: Uint8Array | null, keys: TrustedKeys,
                                pointer: Pointer): Promise<CollectionSpec> {
  const key = `${pointer.collection}@${pointer.version}`;
  await signed(() => verifyBlock(keys.spec, block, specMessage(utf8(key), data), `spec ${key}`));
  if (sha256Hex(data) !== pointer.content_hash) throw new TrustError("hash_mismatch", `spec ${key}: not the bytes the pointer names`);
  let spec: CollectionSpec;
  try {
    await loadMechanisms(needsOf(new TextDecoder().decode(data))); // the mechanisms it names, before it is validated
    spec = parseSpec(data, key);
  } catch (exc) {
    if (exc instanceof SpecError) throw new TrustError("malformed_spec", exc.message);
    throw exc;
  }
  if (specKey(spec) !== key) throw new TrustError("wrong_version", `the signed spec is ${specKey(spec)}, the pointer names ${key}`);
  return spec;
}
