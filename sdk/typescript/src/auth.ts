/**
 * Request signatures and device pseudonyms (`ldpstream.contract.auth`, `ldpstream.contract.pseudonym`).
 *
 * A request carries `Authorization: LDP-HMAC-SHA256 device=<id>,ts=<ms>,sig=<hex>` with sig = HMAC-SHA256(key, METHOD
 * LF path LF ts LF hex sha256(body)). A device is named on the wire by its pseudonym: the first 8 bytes (little-endian)
 * of BLAKE2b(UTF-8 id, key = collection name, person = "ldp-device"), never by its id.
 */

import { toHex, utf8 } from "./bytes.js";
import { blake2b, hmacSha256, leU64, sha256Hex } from "./hashes.js";

export const SCHEME = "LDP-HMAC-SHA256";

/** What a device holds after enrolling: its collection, id and key (the edge keeps none). */
export interface Credential {
  collection: string;
  device: string;
  key: Uint8Array;
}

export function signature(key: Uint8Array, method: string, path: string, timestampMs: number, body: Uint8Array): string {
  const text = `${method.toUpperCase()}\n${path}\n${timestampMs}\n${sha256Hex(body)}`;
  return toHex(hmacSha256(key, utf8(text)));
}

export function authorization(device: string, key: Uint8Array, method: string, path: string, body: Uint8Array,
                              timestampMs: number): string {
  return `${SCHEME} device=${device},ts=${timestampMs},sig=${signature(key, method, path, timestampMs, body)}`;
}

/** The pseudonym of a device id (a string) in a collection. */
export function devicePseudonym(collection: string, device: string): bigint {
  if (!device) throw new RangeError("a device id must not be empty");
  return leU64(blake2b(utf8(device), { digestSize: 8, key: utf8(collection).subarray(0, 64), person: utf8("ldp-device") }));
}
