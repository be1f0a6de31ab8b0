/** Bytes: UTF-8, hex, base64 (standard alphabet, padded, strictly validated) and concatenation. */

const encoder = new TextEncoder();
const strictDecoder = new TextDecoder("utf-8", { fatal: true });

export function utf8(text: string): Uint8Array {
  return encoder.encode(text);
}

/** The text of UTF-8 bytes; throws TypeError for bytes that are not UTF-8. */
export function fromUtf8(data: Uint8Array): string {
  return strictDecoder.decode(data);
}

export function toHex(data: Uint8Array): string {
  let out = "";
  for (const b of data) out += b.toString(16).padStart(2, "0");
  return out;
}

/** Bytes of lowercase or uppercase hex digits (an even number of them); throws Error otherwise. */
export function fromHex(text: string): Uint8Array {
  if (text.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(text)) throw new Error("not hex");
  const out = new Uint8Array(text.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(text.slice(2 * i, 2 * i + 2), 16);
  return out;
}

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const VALUES = new Int16Array(128).fill(-1);
for (let i = 0; i < ALPHABET.length; i++) VALUES[ALPHABET.charCodeAt(i)] = i;

export function toBase64(data: Uint8Array): string {
  let out = "";
  for (let i = 0; i < data.length; i += 3) {
    const a = data[i], b = data[i + 1], c = data[i + 2];
    const n = (a << 16) | ((b ?? 0) << 8) | (c ?? 0);
    out += ALPHABET[(n >> 18) & 63] + ALPHABET[(n >> 12) & 63];
    out += b === undefined ? "=" : ALPHABET[(n >> 6) & 63];
    out += c === undefined ? "=" : ALPHABET[n & 63];
  }
  return out;
}

/** Bytes of standard, padded base64 (as Python's `base64.b64decode(validate=True)` takes it); throws Error otherwise. */
export function fromBase64(text: string): Uint8Array {
  if (text.length % 4 !== 0) throw new Error("not base64: its length is not a multiple of 4");
  const pad = text.endsWith("==") ? 2 : text.endsWith("=") ? 1 : 0;
  const out = new Uint8Array((text.length / 4) * 3 - pad);
  let o = 0;
  for (let i = 0; i < text.length; i += 4) {
    let n = 0;
    for (let j = 0; j < 4; j++) {
      const ch = text.charCodeAt(i + j);
      const last = i + 4 === text.length;
      let v: number;
      if (ch === 61 /* = */ && last && j >= 4 - pad) v = 0;
      else {
        v = ch < 128 ? VALUES[ch] : -1;
        if (v < 0) throw new Error("not base64: a character outside the alphabet");
      }
      n = (n << 6) | v;
    }
    for (let j = 0; j < 3 && o < out.length; j++) out[o++] = (n >> (16 - 8 * j)) & 255;
  }
  return out;
}

export function concatBytes(...parts: Uint8Array[]): Uint8Array {
  let size = 0;
  for (const p of parts) size += p.length;
  const out = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
