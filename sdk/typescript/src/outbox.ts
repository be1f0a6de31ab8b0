/**
 * A device's bounded, persistent outbox and its sending (`ldpstream.device.outbox`).
 *
 * Reports are kept as mechanism output only (never a raw value), in the device's storage, within bounds, so a device
 * offline for weeks cannot fill its storage with reports nobody would take: at most `maxReports` (1,000) and
 * `maxBytes` (1 MiB; the oldest go first), none older than `maxAgeS` (24 h, the edge's oldest accepted report time).
 * A dropped report's budget is never refunded. `flush` sends them oldest first (the order they were made), up to `batch`
 * (50) of one spec version a request as one envelope, signed with the device's credential, and acts on the edge's
 * verdict on each report (docs/reference/protocol.md, "Delivery"): `admitted` or `duplicate` (the edge has it) leave
 * the outbox; `future_timestamp` stays for a later flush; any other verdict (`stale_timestamp`, `out_of_range`, ...)
 * or a 400/403/404/413 answer without verdicts drops the report, its reason counted (`stats`). Connection errors,
 * 429, 503 and 507 are retried with exponential backoff and full jitter, at least as long as Retry-After asks but
 * never longer than `maxBackoffS`; each request has one deadline (`timeoutMs`) and a whole flush another
 * (`flushTimeoutS`, default 120 s): the reports not answered for stay, and so do they on any other status.
 */

import { authorization, type Credential } from "./auth.js";
import { concatBytes, fromBase64, toBase64 } from "./bytes.js";
import { type Answer, type EdgeClient, jsonOf, refusal } from "./edge.js";
import type { Dtype } from "./mechanisms/base.js";
import type { DeviceStorage } from "./storage.js";
import { encodeEnvelope, type Envelope, type WireBlock, type WireColumn } from "./wire.js";

export const VERSION_HEADER = "LDP-Spec-Version";
const RETRYABLE = new Set([429, 503, 507]);
const DONE = new Set([200, 202, 409]);
const HOPELESS = new Set([400, 403, 404, 413]);
// The verdicts on a report (the edge's); what the device does with each: the module documentation.
const ADMITTED = "admitted";
const DUPLICATE = "duplicate";
const FUTURE = "future_timestamp";
const REFUSED = "refused";
const VERDICTS = new Set([ADMITTED, DUPLICATE, FUTURE, "stale_timestamp", "out_of_range", "wrong_shape", "malformed",
                          "unknown_collection", "wrong_device", "too_large", "unsupported_media_type"]);
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
  /** The longest backoff, seconds (default 30); it caps Retry-After too. */
  maxBackoffS?: number;
  /** One request's deadline, ms (default 30,000). */
  timeoutMs?: number;
  /** A whole flush's deadline, seconds (default 120). */
  flushTimeoutS?: number;
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
  /** Reports dropped since this outbox was opened... */
  dropped = 0;
  /** ...by reason (the outbox's bounds, or the edge's verdict). */
  readonly reasons = new Map<string, number>();
  #reports: StoredReport[] = [];
  #writes: Promise<unknown> = Promise.resolve();
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

  /** The reports after `change` of the current ones, kept in storage; one change at a time (a report made while a
   * flush removes what it sent is neither lost nor brought back). */
  #save(change: (reports: StoredReport[]) => StoredReport[]): Promise<void> {
    const run = this.#writes.then(async () => {
      const next = change(this.#reports);
      await this.#storage.set(this.#key, JSON.stringify(next.map(toJson)));
      this.#reports = next;
    });
    this.#writes = run.catch(() => undefined);
    return run;
  }

  #count(reason: string, n: number): void {
    if (n <= 0) return;
    this.dropped += n;
    this.reasons.set(reason, (this.reasons.get(reason) ?? 0) + n);
    console.warn(`ldpstream: ${n} report(s) dropped: ${reason}`);
  }

  /** Keep a report (durably: when this resolves it is in storage), then drop the oldest beyond the bounds. */
  add(report: StoredReport): Promise<void> {
    return this.#save((reports) => {
      const next = [...reports, report];
      let cut = Math.max(0, next.length - this.maxReports);
      let total = next.reduce((s, r) => s + r.size, 0) - next.slice(0, cut).reduce((s, r) => s + r.size, 0);
      while (cut < next.length - 1 && total > this.maxBytes) total -= next[cut++].size;
      this.#count("outbox_full", cut);
      return next.slice(cut);
    });
  }

  /** Drop the reports made more than `maxAgeS` ago; how many. */
  async dropStale(nowMs: number): Promise<number> {
    let gone = 0;
    await this.#save((reports) => {
      const keep = reports.filter((r) => r.madeMs >= nowMs - this.maxAgeS * 1000);
      gone = reports.length - keep.length;
      this.#count("expired", gone);
      return keep;
    });
    return gone;
  }

  /** Remove these reports: delivered (`reason` null), or never admissible (counted under `reason`). */
  remove(gone: ReadonlySet<StoredReport>, reason: string | null = null): Promise<void> {
    return this.#save((reports) => {
      const keep = reports.filter((r) => !gone.has(r));
      if (reason !== null) this.#count(reason, reports.length - keep.length);
      return keep;
    });
  }

  /** Forget every report (a device that left). */
  clear(): Promise<void> {
    return this.#save(() => []);
  }
}

export interface TransportOptions extends OutboxOptions {
  sleep?: (ms: number) => Promise<void>;
  clock?: () => number;
  random?: () => number;
}

/** The wait before attempt `attempt` + 1: full jitter over base * 2^(attempt - 1), at least Retry-After, at most `capS`. */
export function backoffS(attempt: number, retryAfterS: number, baseS: number, capS: number, u: number): number {
  return Math.min(capS, Math.max(retryAfterS, u * Math.min(capS, baseS * 2 ** (attempt - 1))));
}

/** A Retry-After of seconds, digits with an optional fraction (0 for anything else, a date included; the backoff
 * caps it). */
export function retryAfterSeconds(value: string | null): number {
  const text = (value ?? "").trim();
  return /^[0-9]{1,12}(\.[0-9]{1,9})?$/.test(text) ? Number(text) : 0;
}

/** The verdict on each of the `n` reports of a request from the edge's answer (`verdicts`, or for an answer without
 * them the status's: 200/202 admitted, 409 duplicate, 400/403/404/413 the reason given); null when the reports stay. */
export function verdictsOf(answer: Answer, n: number): string[] | null {
  if (!DONE.has(answer.status) && !HOPELESS.has(answer.status)) return null;
  let value: { verdicts?: unknown; reason?: unknown } = {};
  try {
    const parsed = jsonOf(answer.body, answer.status, "the edge's answer");
    if (parsed !== null && typeof parsed === "object") value = parsed as typeof value;
  } catch {
    // not JSON: the status says it
  }
  const given = value.verdicts;
  if (Array.isArray(given) && given.length === n && given.every((v) => typeof v === "string")) {
    return (given as string[]).map((v) => (VERDICTS.has(v) ? v : REFUSED));
  }
  if (DONE.has(answer.status)) return new Array<string>(n).fill(answer.status === 409 ? DUPLICATE : ADMITTED);
  const reason = value.reason;
  return new Array<string>(n).fill(typeof reason === "string" && VERDICTS.has(reason) ? reason : REFUSED);
}

/** What became of a device's reports since it was made. */
export interface DeliveryStats {
  delivered: Record<string, number>;
  dropped: Record<string, number>;
  pending: number;
}

export class HttpTransport {
  readonly batch: number;
  readonly attempts: number;
  readonly baseBackoffS: number;
  readonly maxBackoffS: number;
  readonly flushTimeoutS: number;
  /** The edge's current spec version of the collection, when an answer said it. */
  currentVersion: number | null = null;
  /** The status of the last answer to a report (0: no answer), and the edge's reason when it refused. */
  lastStatus: number | null = null;
  lastReason = "";
  /** Reports the edge took, by verdict (admitted, duplicate). */
  readonly delivered = new Map<string, number>();
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #clock: () => number;
  readonly #random: () => number;
  readonly #timeoutMs: number | undefined;

  readonly #client: EdgeClient;

  constructor(client: EdgeClient, readonly credential: Credential, readonly pseudonym: bigint, readonly outbox: Outbox,
              options: TransportOptions = {}) {
    this.#client = client;
    this.batch = options.batch ?? 50;
    this.attempts = options.attempts ?? 6;
    this.baseBackoffS = options.baseBackoffS ?? 0.2;
    this.maxBackoffS = options.maxBackoffS ?? 30.0;
    this.flushTimeoutS = options.flushTimeoutS ?? 120.0;
    this.#timeoutMs = options.timeoutMs;
    this.#sleep = options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.#clock = options.clock ?? Date.now;
    this.#random = options.random ?? Math.random;
  }

  stats(): DeliveryStats {
    return { delivered: Object.fromEntries(this.delivered), dropped: Object.fromEntries(this.outbox.reasons),
             pending: this.outbox.length };
  }

  /** Send the outbox, oldest first, within `flushTimeoutS`; the number of reports the edge took (`stats` says what
   * became of the others). */
  async flush(): Promise<number> {
    const deadline = performance.now() + this.flushTimeoutS * 1000;
    await this.outbox.dropStale(this.#clock());
    let taken = 0;
    const later = new Set<StoredReport>(); // from the future for the edge's clock: kept for a later flush
    for (;;) {
      const pending = this.outbox.pending().filter((r) => !later.has(r));
      if (!pending.length) break;
      const version = pending[0].version;
      let count = 0;
      while (count < Math.min(this.batch, pending.length) && pending[count].version === version) count++;
      const reports = pending.slice(0, count);
      let body: Uint8Array;
      try {
        body = encodeEnvelope(envelopeOf(this.credential.collection, this.pseudonym, reports));
      } catch (exc) {
        if (!(exc instanceof Error) || exc.message !== MIXED_COLUMNS) throw exc;
        await this.outbox.remove(new Set(reports.slice(0, 1)), "damaged"); // damaged in storage: never admissible
        continue;
      }
      const verdicts = await this.#send(body, count, deadline);
      if (verdicts === null) break;
      const done = new Set<StoredReport>();
      const dropped = new Map<string, Set<StoredReport>>();
      verdicts.forEach((verdict, i) => {
        if (verdict === ADMITTED || verdict === DUPLICATE) {
          done.add(reports[i]);
          this.delivered.set(verdict, (this.delivered.get(verdict) ?? 0) + 1);
        } else if (verdict === FUTURE) later.add(reports[i]);
        else dropped.set(verdict, (dropped.get(verdict) ?? new Set()).add(reports[i]));
      });
      await this.outbox.remove(done);
      for (const [reason, gone] of dropped) await this.outbox.remove(gone, reason);
      taken += done.size;
    }
    return taken;
  }

  /** POST one body of `n` reports with retries before `deadline` (performance.now()): the verdict on each, or null. */
  async #send(body: Uint8Array, n: number, deadline: number): Promise<string[] | null> {
    const path = `/v1/collections/${encodeURIComponent(this.credential.collection)}/reports`;
    if (body.length > MAX_BODY_BYTES) return new Array<string>(n).fill("too_large");
    for (let attempt = 1; attempt <= this.attempts; attempt++) {
      const left = deadline - performance.now();
      if (left <= 0) return null;
      const headers = {
        "Content-Type": "application/msgpack",
        Authorization: authorization(this.credential.device, this.credential.key, "POST", path, body, this.#clock()),
      };
      let retryAfter = 0;
      try {
        const answer = await this.#client.request("POST", path, body, headers, 64 * 2 ** 10,
                                                  Math.min(left, this.#timeoutMs ?? left));
        this.#noteVersion(answer.headers.get(VERSION_HEADER));
        this.lastStatus = answer.status;
        this.lastReason = answer.status >= 300 ? refusal(answer)[0] : "";
        if (!RETRYABLE.has(answer.status)) return verdictsOf(answer, n);
        retryAfter = retryAfterSeconds(answer.headers.get("Retry-After"));
      } catch {
        this.lastStatus = 0;
      }
      if (attempt < this.attempts) {
        const wait = Math.min(1000 * backoffS(attempt, retryAfter, this.baseBackoffS, this.maxBackoffS, this.#random()),
                              deadline - performance.now());
        if (wait > 0) await this.#sleep(wait);
      }
    }
    return null;
  }

  #noteVersion(value: string | null): void {
    if (value !== null && /^[0-9]{1,9}$/.test(value)) this.currentVersion = Number(value);
  }
}
