/**
 * A device's privacy-budget ledger (`ldpstream.device.ledger`), the same rules and the same JSON (format 3) as the
 * Python SDK's: per collection the spend of its last 64 windows (the spec's smallest tumbling window; one all-time
 * window without windows), its odometer, the memos it paid for and its 64-bit secret; device-wide the spend of the last
 * 8 UTC days and the lifetime committed to each collection. A report in a window (or day) at or before one whose
 * spend was dropped is refused, so a clock jump neither locks the device out nor forgets a spend. Only periods near the
 * device's clock are kept: what was charged to windows and days after the clock plus the skew is forgotten, and no
 * drop made while the clock was ahead counts from the present on (future days never lock the present out).
 *
 * `charge` writes the ledger (through the device's storage) before it returns: a report is charged whether or not it
 * is ever sent, and if the write fails (storage full) nothing is charged and the report is not made.
 */

import { BudgetExceeded } from "./errors.js";
import { fsum } from "./fsum.js";
import type { Memo } from "./collector.js";
import type { PrivacyPolicy } from "./policy.js";
import { MAX_SKEW_MS } from "./pointer.js";
import { type CollectionSpec, windowSeconds } from "./spec.js";

export const ALL_TIME_WINDOW = -1;
const EPSILON_SLACK = 1e-9;
const FORMAT = 3;
const WINDOWS_KEPT = 64;
const DAYS_KEPT = 8;
export const DAY_MS = 86_400_000;

export class Spends {
  constructor(readonly kept: number, readonly spent: ReadonlyMap<number, number> = new Map(),
              readonly dropped: number | null = null) {}

  of(period: number): number {
    return this.spent.get(period) ?? 0.0;
  }

  forgotten(period: number): boolean {
    return !this.spent.has(period) && this.dropped !== null && period <= this.dropped;
  }

  /** These spends as the clock sees them in period `present` (`horizon`: the period of the clock plus the skew). */
  near(present: number, horizon: number): Spends {
    const dropped = this.dropped === null ? null : Math.min(this.dropped, present - 1);
    return new Spends(this.kept, new Map([...this.spent].filter(([k]) => k <= horizon)), dropped);
  }

  plus(period: number, epsilon: number): Spends {
    const spent = new Map(this.spent);
    spent.set(period, this.of(period) + epsilon);
    let dropped = this.dropped;
    const order = [...spent.keys()].sort((a, b) => a - b);
    for (const old of order.slice(0, Math.max(0, order.length - this.kept))) {
      spent.delete(old);
      dropped = dropped === null ? old : Math.max(dropped, old);
    }
    return new Spends(this.kept, spent, dropped);
  }

  toJSON(): Record<string, unknown> {
    return { spent: sortedRecord(this.spent), dropped: this.dropped };
  }

  static fromJSON(d: unknown, kept: number): Spends {
    const o = d as { spent: unknown; dropped: unknown };
    if (typeof o !== "object" || o === null || typeof o.spent !== "object" || o.spent === null) throw new Error("spends");
    const spent = new Map([...numberMap(o.spent, "spends")].map(([k, v]) => {
      if (!/^-?[0-9]+$/.test(k)) throw new Error("spends");
      return [Number(k), v];
    }));
    if (o.dropped !== null && !Number.isInteger(o.dropped)) throw new Error("dropped");
    return new Spends(kept, spent, o.dropped as number | null);
  }
}

/** A map as a JSON object, its keys in order. */
function sortedRecord<K extends string | number>(map: ReadonlyMap<K, number>): Record<string, number> {
  return Object.fromEntries([...map].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** The numbers of a JSON object by key; Error naming `what` for a value that is not a number. */
function numberMap(value: unknown, what: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const [k, v] of Object.entries(value as object)) {
    if (typeof v !== "number") throw new Error(what);
    out.set(k, v);
  }
  return out;
}

export interface Account {
  windows: Spends;
  lifetimeSpent: number;
  memos: Map<string, number>;
  secret: bigint | null;
}

function newAccount(): Account {
  return { windows: new Spends(WINDOWS_KEPT), lifetimeSpent: 0.0, memos: new Map(), secret: null };
}

export function windowOf(spec: CollectionSpec, timestampMs: number): number {
  if (!spec.windows.length) return ALL_TIME_WINDOW;
  return Math.floor(timestampMs / (windowSeconds(spec.windows[0]) * 1000));
}

export type Persist = (json: string) => Promise<void>;

export class PrivacyLedger {
  #accounts: Map<string, Account>;
  #days: Spends;
  #commitments: Map<string, number>;
  readonly #persist: Persist | null;

  constructor(persist: Persist | null = null, accounts = new Map<string, Account>(), days = new Spends(DAYS_KEPT),
              commitments = new Map<string, number>()) {
    this.#persist = persist;
    this.#accounts = accounts;
    this.#days = days;
    this.#commitments = commitments;
  }

  spent(spec: CollectionSpec, timestampMs: number): number {
    return this.#accounts.get(spec.name)?.windows.of(windowOf(spec, timestampMs)) ?? 0.0;
  }

  spentOnDay(timestampMs: number): number {
    return this.#days.of(Math.floor(timestampMs / DAY_MS));
  }

  lifetimeSpent(collection: string): number {
    return this.#accounts.get(collection)?.lifetimeSpent ?? 0.0;
  }

  memos(collection: string): Map<string, number> {
    return new Map(this.#accounts.get(collection)?.memos ?? []);
  }

  committed(): Record<string, number> {
    return Object.fromEntries(this.#commitments);
  }

  /** The device's secret for the collection, drawn (with `draw`) and saved on first use. */
  async secret(collection: string, draw: () => bigint): Promise<bigint> {
    const current = this.#accounts.get(collection) ?? newAccount();
    if (current.secret !== null) return current.secret;
    const next = { ...current, secret: draw() };
    await this.#replace(() => this.#accounts.set(collection, next));
    return next.secret;
  }

  /** Reserve `lifetime` for the collection (a commitment never shrinks). */
  async commit(collection: string, lifetime: number): Promise<void> {
    if (!(Number.isFinite(lifetime) && lifetime > 0)) throw new RangeError(`a commitment must be finite and > 0, got ${lifetime}`);
    if (lifetime > (this.#commitments.get(collection) ?? 0.0)) {
      await this.#replace(() => this.#commitments.set(collection, lifetime));
    }
  }

  /** BudgetExceeded if a report costing `epsilon` (default: the spec's) and reading `memos` would exceed a budget. */
  check(spec: CollectionSpec, timestampMs: number, memos: Memo[] = [], policy: PrivacyPolicy | null = null,
        epsilon?: number, nowMs: number = Date.now()): void {
    this.#next(spec, timestampMs, epsilon ?? spec.epsilon, memos, policy, nowMs);
  }

  /** Record a report (kept in storage before this resolves); the budget left in its window. */
  async charge(spec: CollectionSpec, timestampMs: number, memos: Memo[] = [], policy: PrivacyPolicy | null = null,
               epsilon?: number, nowMs: number = Date.now()): Promise<number> {
    const [account, days] = this.#next(spec, timestampMs, epsilon ?? spec.epsilon, memos, policy, nowMs);
    await this.#replace(() => {
      this.#accounts.set(spec.name, account);
      this.#days = days;
    });
    return Math.max(spec.epsilon - account.windows.of(windowOf(spec, timestampMs)), 0.0);
  }

  /** Apply `change` and persist; on a failed write the ledger is as it was (nothing charged) and the error thrown. */
  async #replace(change: () => void): Promise<void> {
    const saved = [new Map(this.#accounts), this.#days, new Map(this.#commitments)] as const;
    change();
    try {
      if (this.#persist !== null) await this.#persist(this.toJSON());
    } catch (exc) {
      [this.#accounts, this.#days, this.#commitments] = [saved[0], saved[1], saved[2]];
      throw exc;
    }
  }

  #next(spec: CollectionSpec, timestampMs: number, epsilon: number, memos: Memo[],
               policy: PrivacyPolicy | null, nowMs: number): [Account, Spends] {
    if (!(Number.isFinite(epsilon) && epsilon > 0)) throw new RangeError(`a report's epsilon must be finite and > 0, got ${epsilon}`);
    const kept = this.#accounts.get(spec.name) ?? newAccount();
    const ahead = nowMs + MAX_SKEW_MS;
    const current = { ...kept, windows: kept.windows.near(windowOf(spec, nowMs), windowOf(spec, ahead)) };
    const days = this.#days.near(Math.floor(nowMs / DAY_MS), Math.floor(ahead / DAY_MS));
    const window = windowOf(spec, timestampMs);
    if (current.windows.forgotten(window)) {
      throw new BudgetExceeded(`${spec.name}: the ledger no longer keeps window ${window}`);
    }
    const total = current.windows.of(window) + epsilon;
    if (total > spec.epsilon * (1 + EPSILON_SLACK)) {
      const where = window === ALL_TIME_WINDOW ? "all time" : `window ${window} (${spec.windows[0]})`;
      throw new BudgetExceeded(`${spec.name}: the spend in ${where} would be ${total} > the budget eps = ${spec.epsilon}`);
    }
    const fresh = new Map<string, number>();
    // A memo the ledger holds under its legacy name is read under it: paid (docs/reference/protocol.md, "Memo naming").
    for (const m of memos) if (!current.memos.has(m.key) && !current.memos.has(m.legacy!)) fresh.set(m.key, m.epsilon);
    const lifetime = current.lifetimeSpent + (spec.privacy === null ? epsilon : fsum([...fresh.values()]));
    checkLifetime(spec, memos, fresh, lifetime);
    const day = Math.floor(timestampMs / DAY_MS);
    if (policy !== null) this.#checkPolicy(spec, policy, epsilon, day, lifetime, days);
    const account: Account = { windows: current.windows.plus(window, epsilon), lifetimeSpent: lifetime,
                               memos: new Map([...current.memos, ...fresh]), secret: current.secret };
    return [account, days.plus(day, epsilon)];
  }

  #checkPolicy(spec: CollectionSpec, policy: PrivacyPolicy, epsilon: number, day: number, lifetime: number,
               days: Spends): void {
    if (days.forgotten(day)) {
      throw new BudgetExceeded(`the ledger no longer keeps day ${day}`);
    }
    const today = days.of(day) + epsilon;
    if (today > policy.maxEpsilonPerDay * (1 + EPSILON_SLACK)) {
      throw new BudgetExceeded(`the spend on day ${day} would be ${today} > maxEpsilonPerDay ${policy.maxEpsilonPerDay}`);
    }
    const committed = this.#commitments.get(spec.name);
    if (committed === undefined) throw new BudgetExceeded(`${spec.name}: not accepted by the device (no lifetime committed)`);
    if (lifetime > committed * (1 + EPSILON_SLACK)) {
      throw new BudgetExceeded(`${spec.name}: the lifetime spend would be ${lifetime} > the ${committed} committed to it`);
    }
  }

  toJSON(): string {
    const collections: Record<string, unknown> = {};
    for (const name of [...this.#accounts.keys()].sort()) {
      const a = this.#accounts.get(name) as Account;
      collections[name] = { windows: a.windows.toJSON(), lifetime_spent: a.lifetimeSpent, memos: sortedRecord(a.memos),
                            secret: a.secret === null ? null : a.secret.toString(16).padStart(16, "0") };
    }
    return JSON.stringify({ format: FORMAT, collections, days: this.#days.toJSON(), commitments: sortedRecord(this.#commitments) });
  }

  /** A ledger from its JSON (format 3 or 2, as the Python SDK writes it); Error if it is not one. */
  static fromJSON(text: string, persist: Persist | null = null): PrivacyLedger {
    try {
      return PrivacyLedger.#parse(text, persist);
    } catch (exc) {
      throw new Error(`not a privacy ledger: ${String(exc)}`);
    }
  }

  static #parse(text: string, persist: Persist | null): PrivacyLedger {
    const data = JSON.parse(text) as Record<string, unknown>;
    if (typeof data !== "object" || data === null || (data.format !== 2 && data.format !== FORMAT)) {
      throw new Error(`not a privacy ledger of format ${FORMAT}`);
    }
    const accounts = new Map<string, Account>();
    for (const [name, raw] of Object.entries(data.collections as Record<string, Record<string, unknown>>)) {
      const windows = Spends.fromJSON(raw.windows, WINDOWS_KEPT);
      const memos = numberMap(raw.memos, "memos");
      const secret = raw.secret;
      if (secret !== null && (typeof secret !== "string" || !/^[0-9a-f]{1,16}$/.test(secret))) throw new Error("secret");
      if (typeof raw.lifetime_spent !== "number") throw new Error("lifetime_spent");
      accounts.set(name, { windows, lifetimeSpent: raw.lifetime_spent, memos,
                           secret: secret === null ? null : BigInt(`0x${secret}`) });
    }
    const days = data.days === undefined ? new Spends(DAYS_KEPT) : Spends.fromJSON(data.days, DAYS_KEPT);
    const commitments = numberMap(data.commitments ?? {}, "commitments");
    const numbers = [...days.spent.values(), ...commitments.values()];
    for (const a of accounts.values()) numbers.push(...a.windows.spent.values(), a.lifetimeSpent, ...a.memos.values());
    if (!numbers.every((x) => Number.isFinite(x) && x >= 0)) throw new Error("a spend that is not a finite number >= 0");
    return new PrivacyLedger(persist, accounts, days, commitments);
  }
}

function checkLifetime(spec: CollectionSpec, memos: Memo[], fresh: Map<string, number>, lifetime: number): void {
  if (spec.privacy === null) {
    if (memos.length) throw new RangeError(`${spec.name}: no privacy block, no memos to charge`);
    return;
  }
  if (!memos.length) throw new RangeError(`${spec.name}: no memos named`);
  if (!memos.every((m) => Number.isFinite(m.epsilon) && m.epsilon > 0)) throw new RangeError(`${spec.name}: a memo's epsilon must be finite and > 0`);
  if (lifetime > spec.privacy.lifetime * (1 + EPSILON_SLACK)) {
    throw new BudgetExceeded(`${spec.name}: the lifetime spend would be ${lifetime} > the lifetime budget ${spec.privacy.lifetime}`);
  }
}
