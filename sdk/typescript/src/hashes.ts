/** The hashes the protocol names, from @noble/hashes (no hand-written crypto): SHA-256, HMAC-SHA256, BLAKE2b. */

import { blake2b as nobleBlake2b } from "@noble/hashes/blake2.js";
import { hmac } from "@noble/hashes/hmac.js";
import { sha256 as nobleSha256 } from "@noble/hashes/sha2.js";
import { toHex, utf8 } from "./bytes.js";

export function sha256(data: Uint8Array): Uint8Array {
  return nobleSha256(data);
}

export function sha256Hex(data: Uint8Array): string {
  return toHex(nobleSha256(data));
}

export function hmacSha256(key: Uint8Array, message: Uint8Array): Uint8Array {
  return hmac(nobleSha256, key, message);
}

export interface Blake2bOptions {
  digestSize: number;
  key?: Uint8Array;
  person?: Uint8Array;
}

/** BLAKE2b as Python's `hashlib.blake2b(data, digest_size=, key=, person=)` computes it. */
export function blake2b(data: Uint8Array, options: Blake2bOptions): Uint8Array {
  const opts: { dkLen: number; key?: Uint8Array; personalization?: Uint8Array } = { dkLen: options.digestSize };
  if (options.key !== undefined && options.key.length > 0) opts.key = options.key;
  if (options.person !== undefined) {
    const person = new Uint8Array(16); // hashlib zero-pads person to 16 bytes
    person.set(options.person);
    opts.personalization = person;
  }
  return nobleBlake2b(data, opts);
}

/** The first 8 bytes of a digest as an unsigned little-endian 64-bit integer. */
export function leU64(data: Uint8Array, offset = 0): bigint {
  let x = 0n;
  for (let i = 7; i >= 0; i--) x = (x << 8n) | BigInt(data[offset + i]);
  return x;
}

/** A stable 64-bit key of a name: the first 8 bytes of its BLAKE2b digest (digest size 8), little-endian. */
export function nameKey(name: string): bigint {
  return leU64(blake2b(utf8(name), { digestSize: 8 }));
}
