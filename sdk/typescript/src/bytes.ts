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

/** Standard, padded base64: groups of 4 of the alphabet, the last one perhaps padded with 1 or 2 "=". */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

export function toBase64(data: Uint8Array): string {
  let binary = "";
  for (const b of data) binary += String.fromCharCode(b);
  return btoa(binary);
}

/** Bytes of standard, padded base64 (as Python's `base64.b64decode(validate=True)` takes it); throws Error otherwise. */
export function fromBase64(text: string): Uint8Array {
  if (typeof text !== "string" || !BASE64.test(text)) throw new Error("not base64");
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

export function concatBytes(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((size, p) => size + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
