/**
 * 64-bit words: SplitMix64's finalizer and the keyed streams of the memoized mechanisms, exactly as the Python side
 * (`ldpstream.mechanisms.hashing`, `ldpstream.mechanisms.longitudinal.memo`) computes them, on BigInt modulo 2^64.
 */

export const MASK64 = (1n << 64n) - 1n;
const MIX1 = 0xbf58476d1ce4e5b9n;
const MIX2 = 0x94d049bb133111ebn;
export const GAMMA = 0x9e3779b97f4a7c15n; // splitmix64's increment
const UNIT = 2 ** -53;

// The collector's tags (`ldpstream.mechanisms.longitudinal.memo`; the memoized mechanisms' own are in
// mechanisms/longitudinal.ts): an attribute's secret, and the attributes a device samples.
export const TAG_ATTRIBUTE = 0x58n;
export const TAG_ATTRIBUTE_SAMPLE = 0x59n;

/** SplitMix64's finalizer: a bijection of 64-bit words with full avalanche. */
export function mix64(x: bigint): bigint {
  let z = x & MASK64;
  z = ((z ^ (z >> 30n)) * MIX1) & MASK64;
  z = ((z ^ (z >> 27n)) * MIX2) & MASK64;
  return z ^ (z >> 31n);
}

/** A uniform 64-bit word deterministic in (secret, tag, keys...): h0 = mix(secret ^ tag), h_i = mix(h + (key_i + 1) G). */
export function keyedWord(secret: bigint, tag: bigint, ...keys: (bigint | number)[]): bigint {
  let h = mix64(secret ^ tag);
  for (const key of keys) h = mix64(h + (((BigInt(key) + 1n) & MASK64) * GAMMA));
  return h;
}

/** The uniform in [0, 1) on the 2^-53 grid of a 64-bit word (its top 53 bits). */
export function wordUniform(word: bigint): number {
  return Number(word >> 11n) * UNIT;
}

export function keyedUniform(secret: bigint, tag: bigint, ...keys: (bigint | number)[]): number {
  return wordUniform(keyedWord(secret, tag, ...keys));
}

/** The secret of attribute `name` (its `name_key`) derived from a device's collection secret. */
export function attributeSecret(secret: bigint, attributeKey: bigint): bigint {
  return keyedWord(secret, TAG_ATTRIBUTE, attributeKey);
}
