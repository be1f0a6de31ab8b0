/**
 * 64-bit words: SplitMix64's finalizer and the keyed streams of the memoized mechanisms, exactly as the Python side
 * (`ldpstream.mechanisms.hashing`, `ldpstream.mechanisms.longitudinal.memo`) computes them, on BigInt modulo 2^64.
 */

export const MASK64 = (1n << 64n) - 1n;
const MIX1 = 0xbf58476d1ce4e5b9n;
const MIX2 = 0x94d049bb133111ebn;
export const GAMMA = 0x9e3779b97f4a7c15n; // splitmix64's increment
const UNIT = 2 ** -53;

// One tag per kind of memoized choice (`ldpstream.mechanisms.longitudinal.memo`).
export const TAG_PERMANENT = 0x51n;
export const TAG_PERMANENT_TIE = 0x53n;
export const TAG_COHORT = 0x54n;
export const TAG_BLOOM = 0x5bn;
export const TAG_ALPHA = 0x55n;
export const TAG_SAMPLE = 0x56n;
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

/**
 * `width` Bernoulli(prob) bits memoized per (secret, key), 8 bits per keyed word, and `uniforms` keyed uniforms from
 * the words after them (`ldpstream.mechanisms.longitudinal.memo.keyed_bits`): byte B gives 1{B < floor(256 prob)},
 * and B equal to that threshold is decided by a uniform keyed by (secret, key, position).
 */
export function keyedBits(secret: bigint, key: bigint | number, width: number, prob: number,
                          uniforms = 0): { bits: Uint8Array; tail: number[] } {
  const words = Math.ceil(width / 8);
  const top = Math.floor(prob * 256);
  const rest = prob * 256 - top;
  const base = keyedWord(secret, TAG_PERMANENT, key);
  const bits = new Uint8Array(width);
  for (let w = 0; w < words; w++) {
    let word = mix64(base + ((BigInt(w) + 1n) * GAMMA));
    for (let b = 0; b < 8 && 8 * w + b < width; b++) {
      const byte = Number(word & 255n);
      word >>= 8n;
      const position = 8 * w + b;
      if (byte < top) bits[position] = 1;
      else if (byte === top) bits[position] = keyedUniform(secret, TAG_PERMANENT_TIE, key, position) < rest ? 1 : 0;
    }
  }
  const tail: number[] = [];
  for (let u = 0; u < uniforms; u++) tail.push(wordUniform(mix64(base + ((BigInt(words + u) + 1n) * GAMMA))));
  return { bits, tail };
}

/** An unsigned 64-bit integer as 8 little-endian bytes. */
export function u64Bytes(x: bigint): Uint8Array {
  const out = new Uint8Array(8);
  let v = x & MASK64;
  for (let i = 0; i < 8; i++) {
    out[i] = Number(v & 255n);
    v >>= 8n;
  }
  return out;
}
