/**
 * The wire format the aggregators decode (`ldpstream.contract.wire`): one MessagePack envelope
 *
 *     [version 1, collection, spec_version, devices (uint64 LE), timestamps (int64 LE),
 *      [[attribute, rows (uint32 LE), [[column name, dtype, data (LE)], ...]], ...]]
 *
 * encoded byte for byte as msgspec encodes it (the smallest int, str and bin forms; tests/vectors/wire.json). Only
 * mechanism output is encoded: the blocks come from `Collector.perturb`.
 */

import { concatBytes, utf8 } from "./bytes.js";
import type { Dtype, ReportColumn } from "./mechanisms/base.js";

export const WIRE_VERSION = 1;

/** A column as it goes on the wire: its name, dtype and little-endian bytes. */
export interface WireColumn {
  name: string;
  dtype: Dtype;
  data: Uint8Array;
}

export interface WireBlock {
  attribute: number;
  rows: number[];
  columns: WireColumn[];
}

export interface Envelope {
  collection: string;
  specVersion: number;
  devices: bigint[];
  timestampsMs: number[];
  blocks: WireBlock[];
}

type Setter = (view: DataView, at: number, value: number | bigint) => void;

/** Each dtype's item size and how an item is written (little-endian); "<u8" is the devices' pseudonyms. */
const LAYOUT: Record<Dtype | "<u8", [size: number, set: Setter]> = {
  "<f8": [8, (d, at, v) => d.setFloat64(at, Number(v), true)],
  "<i8": [8, (d, at, v) => d.setBigInt64(at, BigInt(v), true)],
  "<u8": [8, (d, at, v) => d.setBigUint64(at, BigInt(v), true)],
  "<u4": [4, (d, at, v) => d.setUint32(at, Number(v), true)],
  "|u1": [1, (d, at, v) => d.setUint8(at, Number(v))],
  "|i1": [1, (d, at, v) => d.setInt8(at, Number(v))],
};

/** Values as the little-endian bytes of `dtype`. */
function littleEndian(dtype: Dtype | "<u8", values: readonly (number | bigint)[]): Uint8Array {
  const [size, set] = LAYOUT[dtype];
  const out = new Uint8Array(size * values.length);
  const view = new DataView(out.buffer);
  values.forEach((v, i) => set(view, size * i, v));
  return out;
}

/** A report column's values as little-endian bytes of its dtype. */
export function columnBytes(column: ReportColumn): Uint8Array {
  return littleEndian(column.dtype, column.values);
}

export class Writer {
  #parts: Uint8Array[] = [];

  #head(...bytes: number[]): void {
    this.#parts.push(Uint8Array.from(bytes));
  }

  uint(n: number): void {
    if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`not an unsigned integer: ${n}`);
    if (n < 128) this.#head(n);
    else if (n < 256) this.#head(0xcc, n);
    else if (n < 65536) this.#head(0xcd, n >> 8, n & 255);
    else if (n < 2 ** 32) this.#head(0xce, (n >>> 24) & 255, (n >>> 16) & 255, (n >>> 8) & 255, n & 255);
    else {
      const out = new Uint8Array(9);
      out[0] = 0xcf;
      new DataView(out.buffer).setBigUint64(1, BigInt(n), false);
      this.#parts.push(out);
    }
  }

  #sized(length: number, fix: number | null, fixMax: number, c8: number | null, c16: number, c32: number): void {
    if (fix !== null && length <= fixMax) this.#head(fix | length);
    else if (c8 !== null && length < 256) this.#head(c8, length);
    else if (length < 65536) this.#head(c16, length >> 8, length & 255);
    else this.#head(c32, (length >>> 24) & 255, (length >>> 16) & 255, (length >>> 8) & 255, length & 255);
  }

  str(text: string): void {
    const bytes = utf8(text);
    this.#sized(bytes.length, 0xa0, 31, 0xd9, 0xda, 0xdb);
    this.#parts.push(bytes);
  }

  bin(bytes: Uint8Array): void {
    this.#sized(bytes.length, null, -1, 0xc4, 0xc5, 0xc6);
    this.#parts.push(bytes);
  }

  array(length: number): void {
    this.#sized(length, 0x90, 15, null, 0xdc, 0xdd);
  }

  bytes(): Uint8Array {
    return concatBytes(...this.#parts);
  }
}

/** The msgpack bytes of an envelope (blocks sorted by attribute, columns by name, as the Python encoder sorts them). */
export function encodeEnvelope(env: Envelope): Uint8Array {
  const w = new Writer();
  w.array(6);
  w.uint(WIRE_VERSION);
  w.str(env.collection);
  w.uint(env.specVersion);
  w.bin(littleEndian("<u8", env.devices));
  w.bin(littleEndian("<i8", env.timestampsMs));
  const blocks = [...env.blocks].sort((a, b) => a.attribute - b.attribute);
  w.array(blocks.length);
  for (const block of blocks) {
    w.array(3);
    w.uint(block.attribute);
    w.bin(littleEndian("<u4", block.rows));
    const columns = [...block.columns].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    w.array(columns.length);
    for (const c of columns) {
      w.array(3);
      w.str(c.name);
      w.str(c.dtype);
      w.bin(c.data);
    }
  }
  return w.bytes();
}
