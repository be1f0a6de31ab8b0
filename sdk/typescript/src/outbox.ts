/**
 * A device's bounded, persistent outbox and its sending (`ldpstream.device.outbox`).
 *
 * Reports are kept as mechanism output only (never a raw value), in the device's storage, within bounds, so a device
 * offline for weeks cannot fill its storage with reports nobody would take: at most `maxReports` (1,000) and
 * `maxBytes` (1 MiB; the oldest go first), none older than `maxAgeS` (24 h, the edge's oldest accepted report time).
 * A dropped report's budget is never refunded. `flush` sends them oldest first, up to `batch` (50) of one spec version
 * a request as one envelope, signed with the device's credential; a report leaves the outbox only when the edge
 * acknowledged it (200, 202), said its window was already used (409: an earlier attempt got through) or that it can
 * never be accepted (400, 403, 404, 413). Connection errors, 429, 503 and 507 are retried with exponential backoff
 * and full jitter, at least as long as Retry-After asks; after `attempts` the reports stay for the next flush, and
 * any other status (a 500, a 401) keeps them too.
 */

import { authorization, type Credential } from "./auth.js";
import { concatBytes, fromBase64, toBase64 } from "./bytes.js";
import type { EdgeClient } from "./edge.js";
import type { Dtype } from "./mechanisms/base.js";
import type { DeviceStorage } from "./storage.js";
import { encodeEnvelope, type Envelope, type WireBlock, type WireColumn } from "./wire.js";

export const VERSION_HEADER = "LDP-Spec-Version";
const RETRYABLE = new Set([429, 503, 507]);
const DONE = new Set([200, 202, 409]);
const HOPELESS = new Set([400, 403, 404, 413]);
const DTYPES = new Set(["<f8", "<i8", "<u4", "|u1", "|i1"]);
const MAX_BODY_BYTES = 4 * 2 ** 20;
/** What `envelopeOf` says of stored reports that cannot go in one envelope (damaged in storage). */
const MIXED_COLUMNS = "reports of one version carry different columns";

export interface OutboxOptions {
  /** Reports kept at most (default 1,000; the oldest are dropped beyond). */
  maxReports?: number;
  /** Bytes kept at most (default 1 MiB). */
  maxBytes?: number;
  /** Reports older than this are dropped before a flush (default 86,400 s). */
  maxAgeS?: number;
  /** Reports per request (default 50). */
  batch?: number;
  /** Tries per request on a retryable answer (default 6). */
  attempts?: number;
  /** The first backoff's scale, seconds (default 0.2). */
  baseBackoffS?: number;
  /** The longest backoff, seconds (default 30). */
  maxBackoffS?: number;
}

/** One stored report: its spec version, report time, when it was made, and its attribute blocks (row 0). */
export interface StoredReport {
  version: number;
  timestampMs: number;
  madeMs: number;
  size: number;
  blocks: { attribute: number; columns: WireColumn[] }[];
}

function toJson(r: StoredReport): unknown {
  return { v: r.version, t: r.timestampMs, m: r.madeMs, s: r.size,
           a: r.blocks.map((b) => [b.attribute, b.columns.map((c) => [c.name, c.dtype, toBase64(c.data)])]) };
}

/** A stored report, or null for an entry damaged in storage (dropped: the edge could never accept it). */
function fromJson(value: unknown): StoredReport | null {
  try {
    const o = value as { v: unknown; t: unknown; m: unknown; s: unknown; a: unknown };
    if (![o.v, o.t, o.m, o.s].every(Number.isSafeInteger) || !Array.isArray(o.a)) return null;
    const blocks = (o.a as unknown[]).map((b) => {
      const [attribute, columns] = b as [unknown, unknown];
      if (!Number.isSafeInteger(attribute) || (attribute as number) < 0 || !Array.isArray(columns)) throw new Error("block");
      return {
        attribute: attribute as number,
        columns: (columns as unknown[]).map((c) => {
          const [name, dtype, data] = c as [unknown, unknown, unknown];
          if (typeof name !== "string" || typeof dtype !== "string" || !DTYPES.has(dtype) || typeof data !== "string") throw new Error("column");
          return { name, dtype: dtype as Dtype, data: fromBase64(data) };
        }),
      };
    });
    return { version: o.v as number, timestampMs: o.t as number, madeMs: o.m as number, size: o.s as number, blocks };
  } catch {
    return null;
  }
}

/** The envelope of one device's reports (one spec version): rows numbered in order, columns joined per attribute. */
export function envelopeOf(collection: string, pseudonym: bigint, reports: StoredReport[]): Envelope {
  const byAttribute = new Map<number, WireBlock>();
  reports.forEach((report, row) => {
    for (const b of report.blocks) {
      let block = byAttribute.get(b.attribute);
      if (block === undefined) {
        block = { attribute: b.attribute, rows: [], columns: b.columns.map((c) => ({ ...c, data: new Uint8Array(0) })) };
        byAttribute.set(b.attribute, block);
      }
      block.rows.push(row);
      for (const c of b.columns) {
        const joined = block.columns.find((x) => x.name === c.name);
        if (joined === undefined || joined.dtype !== c.dtype) throw new Error(MIXED_COLUMNS);
        joined.data = concatBytes(joined.data, c.data);
      }
    }
  });
  return { collection, specVersion: reports[0].version, devices: reports.map(() => pseudonym),
           timestampsMs: reports.map((r) => r.timestampMs), blocks: [...byAttribute.values()] };
}

export class Outbox {
  readonly maxReports: number;
  readonly maxBytes: number;
  readonly maxAgeS: number;
  /** Reports dropped by the bounds since this outbox was opened. */
  dropped = 0;
  #reports: StoredReport[] = [];
  readonly #storage: DeviceStorage;
  readonly #key: string;

  private constructor(storage: DeviceStorage, key: string, options: OutboxOptions) {
    this.#storage = storage;
    this.#key = key;
    this.maxReports = options.maxReports ?? 1000;
    this.maxBytes = options.maxBytes ?? 2 ** 20;
    this.maxAgeS = options.maxAgeS ?? 86_400;
  }

  static async open(storage: DeviceStorage, collection: string, options: OutboxOptions = {}): Promise<Outbox> {
    const outbox = new Outbox(storage, `outbox/${collection}`, options);
    const text = await storage.get(outbox.#key);
    if (text) {
      let entries: unknown;
      try {
        entries = JSON.parse(text);
      } catch {
        entries = [];
      }
      outbox.#reports = (Array.isArray(entries) ? entries : []).map(fromJson).filter((r): r is StoredReport => r !== null);
    }
    return outbox;
  }

  get length(): number {
    return this.#reports.length;
  }

  pending(): readonly StoredReport[] {
    return this.#reports;
  }

  async #save(next: StoredReport[]): Promise<void> {
    await this.#storage.set(this.#key, JSON.stringify(next.map(toJson)));
    this.#reports = next;
  }

  /** Keep a report (durably: when this resolves it is in storage), then drop the oldest beyond the bounds. */
  async add(report: StoredReport): Promise<void> {
    const next = [...this.#reports, report];
    let cut = Math.max(0, next.length - this.maxReports);
    let total = next.reduce((s, r) => s + r.size, 0) - next.slice(0, cut).reduce((s, r) => s + r.size, 0);
    while (cut < next.length - 1 && total > this.maxBytes) total -= next[cut++].size;
    this.dropped += cut;
    await this.#save(next.slice(cut));
  }

  /** Drop the reports made more than `maxAgeS` ago; how many. */
  async dropStale(nowMs: number): Promise<number> {
    const keep = this.#reports.filter((r) => r.madeMs >= nowMs - this.maxAgeS * 1000);
    const gone = this.#reports.length - keep.length;
    if (gone) {
      this.dropped += gone;
      await this.#save(keep);
    }
    return gone;
  }

  /** Remove the first `count` reports (sent, or hopeless). */
  async shift(count: number): Promise<void> {
    await this.#save(this.#reports.slice(count));
  }

  /** Forget every report (a device that left). */
  async clear(): Promise<void> {
    await this.#save([]);
  }
}

export interface TransportOptions extends OutboxOptions {
  sleep?: (ms: number) => Promise<void>;
  clock?: () => number;
  random?: () => number;
}

/** The wait before attempt `attempt` + 1: full jitter over base * 2^(attempt - 1) (capped), at least Retry-After. */
export function backoffS(attempt: number, retryAfterS: number, baseS: number, capS: number, u: number): number {
  return Math.max(retryAfterS, u * Math.min(capS, baseS * 2 ** (attempt - 1)));
}

function reasonOf(body: Uint8Array): string {
  try {
    return String((JSON.parse(new TextDecoder().decode(body)) as { reason?: unknown }).reason ?? "").slice(0, 100);
  } catch {
    return "";
  }
}

function retryAfterSeconds(value: string | null): number {
  const seconds = Number(value ?? 0);
  return Number.isFinite(seconds) ? Math.min(Math.max(seconds, 0), 86_400) : 0;
}

export class HttpTransport {
  readonly batch: number;
  readonly attempts: number;
  readonly baseBackoffS: number;
  readonly maxBackoffS: number;
  /** The edge's current spec version of the collection, when an answer said it. */
  currentVersion: number | null = null;
  /** The status of the last answer to a report (0: no answer), and the edge's reason when it refused. */
  lastStatus: number | null = null;
  lastReason = "";
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #clock: () => number;
  readonly #random: () => number;

  readonly #client: EdgeClient;

  constructor(client: EdgeClient, readonly credential: Credential, readonly pseudonym: bigint, readonly outbox: Outbox,
              options: TransportOptions = {}) {
    this.#client = client;
    this.batch = options.batch ?? 50;
    this.attempts = options.attempts ?? 6;
    this.baseBackoffS = options.baseBackoffS ?? 0.2;
    this.maxBackoffS = options.maxBackoffS ?? 30.0;
    this.#sleep = options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.#clock = options.clock ?? Date.now;
    this.#random = options.random ?? Math.random;
  }

  /** Send the outbox, oldest first; the number of reports that left it. */
  async flush(): Promise<number> {
    await this.outbox.dropStale(this.#clock());
    let sent = 0;
    for (;;) {
      const pending = this.outbox.pending();
      if (!pending.length) break;
      const version = pending[0].version;
      let count = 0;
      while (count < Math.min(this.batch, pending.length) && pending[count].version === version) count++;
      let status: number;
      try {
        status = await this.#send(encodeEnvelope(envelopeOf(this.credential.collection, this.pseudonym, pending.slice(0, count))));
      } catch (exc) {
        if (!(exc instanceof Error) || exc.message !== MIXED_COLUMNS) throw exc;
        count = 1; // a stored report damaged in storage: the edge could never accept it
        status = 400;
      }
      if (!DONE.has(status) && !HOPELESS.has(status)) break;
      await this.outbox.shift(count);
      sent += count;
    }
    return sent;
  }

  /** POST one body with retries; the final status (0: no answer). */
  async #send(body: Uint8Array): Promise<number> {
    const path = `/v1/collections/${encodeURIComponent(this.credential.collection)}/reports`;
    if (body.length > MAX_BODY_BYTES) return 413;
    let status = 0;
    for (let attempt = 1; attempt <= this.attempts; attempt++) {
      const headers = {
        "Content-Type": "application/msgpack",
        Authorization: authorization(this.credential.device, this.credential.key, "POST", path, body, this.#clock()),
      };
      let retryAfter = 0;
      try {
        const answer = await this.#client.request("POST", path, body, headers, 64 * 2 ** 10);
        this.#noteVersion(answer.headers.get(VERSION_HEADER));
        status = this.lastStatus = answer.status;
        this.lastReason = status >= 300 ? reasonOf(answer.body) : "";
        if (!RETRYABLE.has(status)) return status;
        retryAfter = retryAfterSeconds(answer.headers.get("Retry-After"));
      } catch {
        status = this.lastStatus = 0;
      }
      if (attempt < this.attempts) {
        await this.#sleep(1000 * backoffS(attempt, retryAfter, this.baseBackoffS, this.maxBackoffS, this.#random()));
      }
    }
    return status;
  }

  #noteVersion(value: string | null): void {
    if (value !== null && /^[0-9]{1,9}$/.test(value)) this.currentVersion = Number(value);
  }
}
