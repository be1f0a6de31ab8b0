/**
 * The device: one device reporting to one collection (`ldpstream.device.sdk`).
 *
 *     const device = await Device.join({ edge, collection, token, trustedKeys, policy, storage });
 *     await device.report({ battery_level: 71, network_type: "wifi" });   // perturb, charge, queue
 *     await device.flush();                                                // send the outbox
 *
 * `join` fetches the collection's pointer and spec, verifies both against `trustedKeys` (what `ldp spec keys --json`
 * prints) before parsing them, holds the spec against the app's `policy`, and only then enrols with `token` (once: a
 * device that joined before reuses its credential and may pass no token). A refused spec charges nothing, sends
 * nothing and never enrols; `SpecRefused.code` says why, and `device.verdict` keeps it for the app.
 *
 * `report` validates and perturbs the record, charges the privacy ledger (which refuses what would exceed the spec's
 * budgets or the policy's caps), and stores the encoded report in the bounded outbox: the budget is charged when the
 * report is made, and kept in storage before `report` resolves. The raw record goes no further than the perturbation;
 * the device id never leaves as such (its pseudonym does). Everything the device learns is kept in its storage, so a
 * restart (a page reload) neither resets its budget nor re-draws its memoized answers.
 */

import { authorization, type Credential, devicePseudonym } from "./auth.js";
import { Collector, pinnedStrategies, type Strategies, type TrueRecord } from "./collector.js";
import { EdgeClient, type Fetch } from "./edge.js";
import { EdgeError, SpecError, SpecRefused, StateError, TrustError } from "./errors.js";
import { PrivacyLedger } from "./ledger.js";
import type { FactorizationMechanism } from "./mechanisms/factorization.js";
import { strategyFromNpz } from "./mechanisms/optional.js";
import { type DeliveryStats, envelopeOf, HttpTransport, Outbox, type TransportOptions } from "./outbox.js";
import { MAX_SKEW_MS, type Pointer, POINTER_PERIOD_MS, parsePointer, pointerExpired } from "./pointer.js";
import { judge, makePolicy, type PolicyOptions, type PrivacyPolicy } from "./policy.js";
import { CryptoRandom, type Random } from "./random.js";
import { type PinnedKeysJson, type TrustedKeys, trustedKeysFromJson } from "./signatures.js";
import type { CollectionSpec } from "./spec.js";
import { type CollectionState, DeviceState, type VerdictJson } from "./state.js";
import { type DeviceStorage, indexedDbStorage } from "./storage.js";
import { checkPointer, checkSpec } from "./trust.js";
import { columnBytes, encodeEnvelope } from "./wire.js";
export { authorization };

export interface JoinOptions {
  /** The ingestion edge's base URL, e.g. "http://127.0.0.1:8080". */
  edge: string;
  /** The collection's name. */
  collection: string;
  /** The enrolment token the app's backend gave this device (`ldp devices mint-token`); null once enrolled. */
  token?: string | null;
  /** The pinned keys: exactly what `ldp spec keys --json` prints. */
  trustedKeys: PinnedKeysJson | TrustedKeys;
  /** The app's privacy policy (fields optional; the defaults of `DEFAULT_POLICY`); null for none. */
  policy?: PolicyOptions | null;
  /** Where the device keeps its state: IndexedDB by default in a browser; in Node a directory path or a
   * get/set object (`DeviceStorage`). */
  storage?: DeviceStorage | string;
  /** The outbox's bounds and the sending's retries and deadlines (`timeoutMs`, one request's, also of the join's
   * requests: default 30,000; `flushTimeoutS`, a whole flush's: default 120; `maxBackoffS`, which caps Retry-After:
   * default 30). */
  outbox?: TransportOptions;
  /** The clock, ms since the epoch (default Date.now). */
  clock?: () => number;
  /** The HTTP client (default the platform's fetch). */
  fetch?: Fetch;
  /** Where the noise comes from (default `crypto.getRandomValues`). */
  random?: Random;
}

/** The device's storage: a directory in Node (a path), the given get/set object, or IndexedDB in a browser. */
export async function storageOf(storage: DeviceStorage | string | undefined): Promise<DeviceStorage> {
  if (typeof storage === "string") {
    const { directoryStorage } = await import("./node.js");
    return directoryStorage(storage);
  }
  if (storage !== undefined) return storage;
  if ((globalThis as { indexedDB?: unknown }).indexedDB !== undefined) return indexedDbStorage();
  throw new StateError("no IndexedDB here: pass `storage`");
}

/** The device's privacy ledger, kept in `storage` (every charge written before it counts); StateError if it is damaged. */
export async function openLedger(storage: DeviceStorage): Promise<PrivacyLedger> {
  const persist = async (json: string) => {
    try {
      await storage.set("ledger", json);
    } catch (exc) {
      throw new StateError(`cannot write the privacy ledger (nothing charged): ${String(exc)}`);
    }
  };
  try {
    const text = await storage.get("ledger");
    return text === undefined || text === null ? new PrivacyLedger(persist) : PrivacyLedger.fromJSON(text, persist);
  } catch (exc) {
    throw new StateError(`the privacy ledger is damaged (${String(exc)}): repair or reset it`);
  }
}

/** The lifetime the device commits to a spec its policy accepts; SpecRefused (the verdict) if it does not. */
function accepted(spec: CollectionSpec, policy: PrivacyPolicy, ledger: PrivacyLedger, strategies: Strategies): number {
  const verdict = judge(spec, policy, ledger.committed(), strategies);
  if (!verdict.accepted) throw new SpecRefused(verdict.code, verdict.reason);
  return verdict.commitment;
}

/** A joined device's link to its edge: its trust state and how to renew it. */
class Link {
  constructor(readonly client: EdgeClient, readonly keys: TrustedKeys, readonly state: DeviceState,
              readonly collection: string, readonly clock: () => number) {}

  get mine(): CollectionState {
    return this.state.of(this.collection);
  }

  /** The collection's current spec, checked (`trust`): the pointer fetched (or the kept one on 304), the spec
   * fetched when it moved on (else the kept bytes, verified again). Kept only once they pass. */
  async trustedSpec(): Promise<CollectionSpec> {
    const mine = this.mine;
    const fetched = await this.client.pointer(this.collection, mine.pointer !== null ? mine.pointerEtag : null);
    const [body, block, etag] = fetched === null ? [mine.pointer, mine.pointerBlock, mine.pointerEtag]
      : [fetched.body, fetched.block, fetched.etag];
    if (body === null) throw new EdgeError(304, "bad_answer", "a 304 to a device that holds no pointer");
    let spec: CollectionSpec, specBytes: Uint8Array, specBlock: Uint8Array | null, pointer: Pointer;
    try {
      pointer = await checkPointer(body, block, this.keys, this.collection, mine.seen, this.clock());
      [spec, specBytes, specBlock] = await this.#specOf(pointer);
    } catch (exc) {
      if (exc instanceof TrustError) throw new SpecRefused(exc.code, exc.message);
      throw exc;
    }
    Object.assign(mine, { seen: { version: pointer.version, sequence: pointer.sequence }, pointer: body, pointerBlock: block,
                          pointerEtag: etag, spec: specBytes, specBlock });
    await this.state.save();
    return spec;
  }

  async #specOf(pointer: Pointer): Promise<[CollectionSpec, Uint8Array, Uint8Array | null]> {
    const mine = this.mine;
    if (mine.spec !== null && mine.seen.version === pointer.version) {
      try {
        return [await checkSpec(mine.spec, mine.specBlock, this.keys, pointer), mine.spec, mine.specBlock];
      } catch (exc) {
        if (!(exc instanceof TrustError)) throw exc; // kept bytes that no longer verify: fetch them again
      }
    }
    const fetched = await this.client.spec(this.collection, pointer.version);
    return [await checkSpec(fetched.body, fetched.block, this.keys, pointer), fetched.body, fetched.block];
  }

  /** The factorization strategies the spec pins, fetched and checked against their hashes. */
  async strategies(spec: CollectionSpec): Promise<Strategies> {
    const out = new Map<string, FactorizationMechanism>();
    try {
      for (const hash of pinnedStrategies(spec)) {
        out.set(hash, await strategyFromNpz(await this.client.strategy(hash), hash));
      }
    } catch (exc) {
      if (exc instanceof SpecError) throw new SpecRefused("malformed_strategy", exc.message);
      throw exc;
    }
    return out;
  }

  async remember(accepted: boolean, code = "", reason = ""): Promise<void> {
    this.mine.verdict = { accepted, code, reason };
    await this.state.save();
  }

  keptPointer(): Pointer | null {
    try {
      return this.mine.pointer === null ? null : parsePointer(this.mine.pointer);
    } catch {
      return null;
    }
  }

  requireReady(): void {
    const verdict = this.mine.verdict;
    if (verdict === null || !verdict.accepted) {
      throw new SpecRefused(verdict?.code || "not_joined", verdict?.reason || "not joined");
    }
    const pointer = this.keptPointer();
    if (pointer === null || pointerExpired(pointer, this.clock())) {
      throw new SpecRefused("expired", `the pointer to '${this.collection}' expired: \`refresh\``);
    }
  }

  due(): boolean {
    const pointer = this.keptPointer();
    return pointer === null || this.clock() - pointer.issued_ms >= POINTER_PERIOD_MS;
  }
}

/** `timestampMs` if a device may make a report at that time by its clock `clockMs`: an integer after 1970 and at most
 * the clock skew ahead of the clock; RangeError otherwise (`ldpstream.device.sdk.check_report_time`). */
export function checkReportTime(timestampMs: number, clockMs: number): number {
  if (!Number.isSafeInteger(timestampMs) || timestampMs <= 0 || timestampMs > clockMs + MAX_SKEW_MS) {
    throw new RangeError(`a report time is integer ms after 1970 and at most 5 min after the clock (${clockMs}), not ${timestampMs}`);
  }
  return timestampMs;
}

export class Device {
  /** The spec the device reports to now. */
  spec: CollectionSpec;
  /** The device's pseudonym in its collection (what the aggregators see). */
  readonly pseudonym: bigint;
  #collector: Collector;
  #queue: Promise<unknown> = Promise.resolve();
  #flushing: Promise<number> | null = null;
  readonly #link: Link;
  readonly #random: Random;

  private constructor(link: Link, readonly ledger: PrivacyLedger, readonly transport: HttpTransport,
                      readonly policy: PrivacyPolicy | null, random: Random, spec: CollectionSpec, strategies: Strategies) {
    this.#link = link;
    this.#random = random;
    this.spec = spec;
    this.#collector = new Collector(spec, strategies);
    this.pseudonym = devicePseudonym(spec.name, transport.credential.device);
  }

  /** Join `collection` at `edge` (see the module documentation); SpecRefused (nothing charged or sent, `.code` says
   * why), EdgeError (the edge refused the token or cannot be reached), StateError (the state cannot be kept). */
  static async join(options: JoinOptions): Promise<Device> {
    const keys = "spec" in options.trustedKeys && options.trustedKeys.spec instanceof Map
      ? options.trustedKeys as TrustedKeys : trustedKeysFromJson(options.trustedKeys);
    const policy = options.policy === null ? null : makePolicy(options.policy ?? {});
    const clock = options.clock ?? Date.now;
    const storage = await storageOf(options.storage);
    const state = await DeviceState.open(storage);
    const ledger = await openLedger(storage);
    const client = new EdgeClient(options.edge, options.fetch, options.outbox?.timeoutMs);
    const link = new Link(client, keys, state, options.collection, clock);
    let spec: CollectionSpec, strategies: Strategies, commitment = 0;
    try { // the spec first: a device that refuses it never enrols
      spec = await link.trustedSpec();
      strategies = await link.strategies(spec);
      commitment = policy === null ? 0 : accepted(spec, policy, ledger, strategies);
    } catch (exc) {
      if (exc instanceof SpecRefused) await link.remember(false, exc.code, exc.message);
      throw exc;
    }
    const mine = link.mine;
    if (mine.credential === null) {
      if (!options.token) throw new EdgeError(0, "no_token", `not joined to '${options.collection}': an enrolment token is needed`);
      mine.credential = await client.enroll(options.token, options.collection);
      await state.save();
    }
    if (commitment > 0) await ledger.commit(spec.name, commitment); // accepted and enrolled: its lifetime is reserved
    const outbox = await Outbox.open(storage, options.collection, options.outbox);
    const pseudonym = devicePseudonym(options.collection, mine.credential.device);
    const transport = new HttpTransport(client, mine.credential, pseudonym, outbox, { clock, ...options.outbox });
    const device = new Device(link, ledger, transport, policy, options.random ?? new CryptoRandom(), spec, strategies);
    await link.remember(true);
    return device;
  }

  /** Whether the device accepts its collection's current spec, and why not: the app shows it. */
  get verdict(): VerdictJson | null {
    return this.#link.mine.verdict;
  }

  /** The reports waiting in the outbox. */
  get pending(): number {
    return this.transport.outbox.length;
  }

  get credential(): Credential {
    return this.transport.credential;
  }

  /** What became of this device's reports since it joined: delivered by verdict, dropped by reason, pending. */
  stats(): DeliveryStats {
    return this.transport.stats();
  }

  /** One operation at a time (reports and refreshes never interleave their writes; a flush's sending runs beside
   * them, its outbox writes ordered by the outbox). */
  #serial<T>(operation: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(operation, operation);
    this.#queue = run.catch(() => undefined);
    return run;
  }

  /** Fetch the pointer again (and the spec, if it moved on), verify and judge it; the verdict. The last good spec stays
   * in use when the edge cannot be reached or serves something the device does not believe. */
  refresh(): Promise<VerdictJson | null> {
    return this.#serial(() => this.#refreshNow());
  }

  async #refreshNow(): Promise<VerdictJson | null> {
    try {
      const spec = await this.#link.trustedSpec();
      if (spec.version !== this.spec.version || JSON.stringify(spec) !== JSON.stringify(this.spec)) {
        const strategies = await this.#link.strategies(spec);
        if (this.policy !== null) {
          await this.ledger.commit(spec.name, accepted(spec, this.policy, this.ledger, strategies));
        }
        this.#collector = new Collector(spec, strategies);
        this.spec = spec;
      }
      await this.#link.remember(true);
    } catch (exc) {
      if (exc instanceof SpecRefused) await this.#link.remember(false, exc.code, exc.message);
      else if (!(exc instanceof EdgeError)) throw exc; // offline, or the edge is down: the last good spec stands
    }
    return this.verdict;
  }

  /**
   * Perturb, charge and queue one report; the encoded message. `timestampMs` is the report time (default the device's
   * clock): after 1970 and at most the clock skew (5 min) ahead of the clock, else RangeError. It never waits for a
   * flush's network. RecordError for a malformed record, BudgetExceeded when a budget or a policy cap would be exceeded, SpecRefused
   * when the device does not accept its collection's spec now, StateError when the charge cannot be kept (storage
   * full: nothing charged, no report).
   */
  report(record: TrueRecord, timestampMs?: number): Promise<Uint8Array> {
    return this.#serial(async () => {
      this.#link.requireReady();
      const clock = this.#link.clock();
      const now = checkReportTime(timestampMs ?? clock, clock);
      const spec = this.spec;
      let secret: bigint | null = null, memos: { key: string; epsilon: number }[] = [];
      if (spec.privacy !== null) {
        this.#collector.inputs(record); // a malformed record draws no secret
        secret = await this.ledger.secret(spec.name, () => this.#random.word64());
        memos = this.#collector.memos(record, secret);
      }
      this.ledger.check(spec, now, memos, this.policy, undefined, clock);
      const blocks = this.#collector.perturb(record, this.#random, secret);
      await this.ledger.charge(spec, now, memos, this.policy, undefined, clock);
      const stored = {
        version: spec.version, timestampMs: now, madeMs: this.#link.clock(), size: 0,
        blocks: blocks.map((b) => ({
          attribute: b.attribute,
          columns: Object.entries(b.report).map(([name, c]) => ({ name, dtype: c.dtype, data: columnBytes(c) })),
        })),
      };
      const message = encodeEnvelope(envelopeOf(spec.name, this.pseudonym, [stored]));
      stored.size = message.length;
      await this.transport.outbox.add(stored);
      return message;
    });
  }

  /** Send the outbox within `flushTimeoutS` (and the refreshes within their requests' deadlines); the number of
   * reports the edge took (`stats` says what became of the others). The spec is refreshed first when its pointer is
   * due, and after when the edge says the version moved on. Reports made meanwhile do not wait for it; a flush asked
   * for while one runs is that one. */
  flush(): Promise<number> {
    this.#flushing ??= (async () => {
      try {
        if (this.#link.due()) await this.refresh();
        const sent = await this.transport.flush();
        const movedOn = this.transport.currentVersion;
        if (movedOn !== null && movedOn > this.spec.version) await this.refresh();
        return sent;
      } finally {
        this.#flushing = null;
      }
    })();
    return this.#flushing;
  }

  /** Delete this device's enrolment at the edge, forget its credential and drop the reports not sent (their budget
   * stays spent); it reports nothing more until it joins again with a token. */
  leave(): Promise<void> {
    return this.#serial(async () => {
      await this.#link.client.leave(this.transport.credential, this.#link.clock());
      await this.transport.outbox.clear();
      const mine = this.#link.mine;
      mine.credential = null;
      mine.verdict = { accepted: false, code: "left", reason: "the device left the collection" };
      await this.#link.state.save();
    });
  }
}
