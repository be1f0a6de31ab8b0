/**
 * A device that trains: one device's updates to one training job (docs/reference/protocol.md section 13; the Python
 * SDK's `ldpstream.device.training`).
 *
 *     const { TrainingDevice } = await import("@ldpstream/device/training");
 *     const device = await TrainingDevice.join({ edge, job, token, trustedKeys, policy, storage });
 *     await device.train(examples);   // [{ features, label }]: the device's own rows; they never leave the call
 *     await device.flush();
 *
 * `join` fetches the job's spec, verifies it against the pinned spec keys before parsing it (the version of its
 * `LDP-Job-Version` header is the one the signature binds), lets the app's policy judge it (`judgeJob`: the same
 * fields and codes as a collection; a refusal charges nothing, sends nothing, and the device never enrols), then
 * enrols with the token as `job/JOB`.
 *
 * `train` makes one update: (1) the current model descriptor (ETag, 304), verified against the pinned online keys and
 * checked (`checkDescriptor`: the job's shape and size before anything is fetched or allocated, no rollback, not
 * issued in the future, not past its validity, not done); (2) the version's bytes, read up to the announced size,
 * checked against the sha256 and decoded; (3) the mean gradient of the examples, clipped and perturbed with the job's
 * mechanism; (4) the ledger charges the job's epsilon under `job/JOB` (one all-time window whose budget is
 * epsilon x max_rounds, the policy's daily cap and the lifetime committed at join, as the Python SDK's ledger view)
 * before (5) the update is queued in the bounded, persistent outbox, which `flush` sends with backoff (9.4: `200`
 * delivered, `409 duplicate` delivered, any other 4xx dropped under its reason, no answer / 429 / 503 kept). At most
 * one update per model version, remembered across restarts.
 */

import { authorization, devicePseudonym } from "../auth.js";
import { type JoinOptions, openLedger, storageOf } from "../device.js";
import { EdgeClient, refusal } from "../edge.js";
import { EdgeError, SpecRefused, StateError, TrustError } from "../errors.js";
import { fsum } from "../fsum.js";
import type { PrivacyLedger } from "../ledger.js";
import { backoffS, Outbox, retryAfterSeconds, type StoredReport, type TransportOptions } from "../outbox.js";
import { makePolicy, type PrivacyPolicy, type Verdict } from "../policy.js";
import { CryptoRandom, type Random } from "../random.js";
import { blockFromHeader, type TrustedKeys, trustedKeysFromJson } from "../signatures.js";
import type { CollectionSpec } from "../spec.js";
import { DeviceState } from "../state.js";
import type { DeviceStorage } from "../storage.js";
import { capRatio } from "./gradients.js";
import { computeUpdate, JOB_PREFIX, type JobSpec, MAX_DESCRIPTOR_BYTES, MAX_JOB_SPEC_BYTES, MAX_MODEL_BYTES,
  type ModelDescriptor } from "./job.js";
import type { Example } from "./model.js";
import { checkDescriptor, checkJobSpec, checkModelBytes } from "./train.js";

const BUDGET_RTOL = 1e-9;
const MAX_ANSWER_BYTES = 64 * 1024;
const RETRYABLE = new Set([429, 503, 507]);

/** Accept a training job under the policy (protocol 13.1), with the same fields and codes as a collection (the
 * Python SDK's `judge_job`): the cap parameters against the job's epsilon, epsilon per update against the per-report
 * and per-day caps, the mechanism against the allowed ones, and the most the job can cost, epsilon x max_rounds,
 * against the per-collection and per-device lifetimes (keyed `job/JOB`). */
export function judgeJob(job: JobSpec, policy: PrivacyPolicy, committed: Readonly<Record<string, number>>): Verdict {
  const refuse = (code: string, reason: string): Verdict => ({ accepted: false, code, reason, commitment: 0 });
  const eps = job.epsilon;
  let ratio: number;
  try {
    ratio = capRatio(job.mechanism.p, job.mechanism.q);
  } catch (exc) {
    return refuse("policy_unbuildable", `the job's mechanism cannot be built: ${(exc as Error).message}`);
  }
  if (!(ratio <= Math.exp(eps) * (1 + BUDGET_RTOL))) {
    return refuse("policy_unbuildable", `the job's cap parameters spend eps = ${Math.log(ratio)}, more than its stated epsilon ${eps}`);
  }
  if (eps > policy.maxEpsilonPerReport * (1 + BUDGET_RTOL)) {
    return refuse("policy_epsilon_per_report", `epsilon per update ${eps} exceeds the policy's maxEpsilonPerReport ${policy.maxEpsilonPerReport}`);
  }
  if (eps > policy.maxEpsilonPerDay * (1 + BUDGET_RTOL)) {
    return refuse("policy_epsilon_per_day", `epsilon per update ${eps} exceeds the policy's maxEpsilonPerDay ${policy.maxEpsilonPerDay}`);
  }
  if (!policy.allowedMechanisms.includes(job.mechanism.name)) {
    return refuse("policy_mechanism", `mechanism '${job.mechanism.name}' is not among the policy's allowedMechanisms`);
  }
  const key = JOB_PREFIX + job.job_id;
  const wanted = eps * job.max_rounds;
  if (wanted > policy.maxLifetimePerCollection * (1 + BUDGET_RTOL)) {
    return refuse("policy_lifetime_per_collection", `the job can cost ${wanted} (eps ${eps} x ${job.max_rounds} rounds) > the policy's maxLifetimePerCollection ${policy.maxLifetimePerCollection}`);
  }
  const needed = Math.max(committed[key] ?? 0, wanted);
  const others = fsum(Object.entries(committed).filter(([name]) => name !== key).map(([, v]) => v));
  if (others + needed > policy.maxLifetimePerDevice * (1 + BUDGET_RTOL)) {
    return refuse("policy_lifetime_per_device", `accepting '${key}' would commit ${others + needed} over the device's collections and jobs > the policy's maxLifetimePerDevice ${policy.maxLifetimePerDevice}`);
  }
  return { accepted: true, code: "", reason: "", commitment: needed };
}

/** How the ledger sees a job (the Python SDK's `LedgerView`): one all-time window whose budget is what the job may
 * cost, charged epsilon per update; no memos. */
function ledgerView(spec: JobSpec): CollectionSpec {
  return { name: JOB_PREFIX + spec.job_id, epsilon: spec.epsilon * spec.max_rounds, windows: [], privacy: null } as unknown as CollectionSpec;
}

/** What `TrainingDevice.join` takes: `Device.join`'s options (the same edge, token, pinned keys, policy, storage,
 * outbox, clock, fetch and randomness), with the training job's id in place of the collection. */
export interface JobJoinOptions extends Omit<JoinOptions, "collection"> {
  /** The training job's id; its token comes from `ldp devices mint-token --job JOB`. */
  job: string;
}

function trustRefusal(exc: unknown): unknown {
  return exc instanceof TrustError ? new SpecRefused(exc.code, exc.message) : exc;
}

/** One device's updates to one training job (module documentation). */
export class TrainingDevice {
  readonly delivered = new Map<string, number>();
  #descriptor: ModelDescriptor | null = null;
  #etag: string | null = null;
  #theta: { sha256: string; params: Float64Array } | null = null;
  #serialized: Promise<unknown> = Promise.resolve();

  private constructor(readonly spec: JobSpec, private readonly client: EdgeClient, private readonly keys: TrustedKeys,
                      private readonly state: DeviceState, readonly ledger: PrivacyLedger, readonly outbox: Outbox,
                      private readonly storage: DeviceStorage, readonly policy: PrivacyPolicy | null,
                      private readonly random: Random, private readonly clock: () => number,
                      private readonly options: TransportOptions) {}

  get key(): string {
    return JOB_PREFIX + this.spec.job_id;
  }

  /** The device of training job `job`: its spec verified and accepted by the policy, then (only then) enrolled.
   * SpecRefused (nothing charged or sent) for a trust or policy rule; EdgeError when the edge refuses or is away. */
  static async join(options: JobJoinOptions): Promise<TrainingDevice> {
    const keys = "spec" in options.trustedKeys && options.trustedKeys.spec instanceof Map
      ? options.trustedKeys as TrustedKeys : trustedKeysFromJson(options.trustedKeys);
    const policy = options.policy === null ? null : makePolicy(options.policy ?? {});
    const clock = options.clock ?? Date.now;
    const storage = await storageOf(options.storage);
    const state = await DeviceState.open(storage);
    const ledger = await openLedger(storage);
    const client = new EdgeClient(options.edge, options.fetch, options.outbox?.timeoutMs);
    const key = JOB_PREFIX + options.job;
    const mine = state.of(key);
    const path = `/v1/jobs/${encodeURIComponent(options.job)}`;
    const answer = await client.request("GET", path, null, {}, MAX_JOB_SPEC_BYTES);
    if (answer.status !== 200) {
      const [reason, detail] = refusal(answer);
      throw new EdgeError(answer.status, reason, `GET ${path}: ${answer.status} ${reason}: ${detail}`);
    }
    let spec: JobSpec;
    try {
      const header = answer.headers.get("ldp-job-version");
      const version = Number(header);
      if (header === null || !Number.isSafeInteger(version) || version < 1) {
        throw new SpecRefused("malformed_job", `no valid LDP-Job-Version header (${String(header)}): the version the signature binds ` +
                              "(a page on another origin needs the edge to expose it)");
      }
      let block: Uint8Array | null;
      try {
        block = blockFromHeader(answer.headers.get("ldp-signature"));
      } catch {
        block = new Uint8Array(0);
      }
      spec = await checkJobSpec(answer.body, block, keys, options.job, version, mine.seen.version)
        .catch((exc: unknown) => { throw trustRefusal(exc); });
      if (policy !== null) {
        const verdict = judgeJob(spec, policy, ledger.committed());
        if (!verdict.accepted) throw new SpecRefused(verdict.code, verdict.reason);
        await ledger.commit(key, verdict.commitment);
      }
      mine.spec = answer.body;
      mine.specBlock = block;
    } catch (exc) {
      if (exc instanceof SpecRefused) {
        mine.verdict = { accepted: false, code: exc.code, reason: exc.message };
        await state.save();
      }
      throw exc;
    }
    mine.seen = { version: spec.version, sequence: mine.seen.version === spec.version ? mine.seen.sequence : -1 };
    mine.verdict = { accepted: true, code: "", reason: "" };
    if (mine.credential === null) {
      if (options.token === undefined || options.token === null) {
        throw new EdgeError(0, "no_token", `the device has not joined '${key}': an enrolment token is needed`);
      }
      mine.credential = await client.enroll(options.token, key);
    }
    await state.save();
    const outbox = await Outbox.open(storage, `job-${options.job}`, options.outbox);
    return new TrainingDevice(spec, client, keys, state, ledger, outbox, storage, policy,
                              options.random ?? new CryptoRandom(), clock, options.outbox ?? {});
  }

  /** One thing at a time: an update is made from one model version, charged and queued before the next starts. */
  #serial<T>(run: () => Promise<T>): Promise<T> {
    const next = this.#serialized.then(run, run);
    this.#serialized = next.catch(() => undefined);
    return next;
  }

  /** The current model version, verified (module documentation, steps 1-2): its descriptor and parameters.
   * SpecRefused with the rule's code; EdgeError when the edge does not answer. */
  async model(): Promise<[ModelDescriptor, Float64Array]> {
    const mine = this.state.of(this.key);
    const path = `/v1/jobs/${encodeURIComponent(this.spec.job_id)}/model`;
    const headers: Record<string, string> = this.#descriptor !== null && this.#etag !== null ? { "If-None-Match": this.#etag } : {};
    const answer = await this.client.request("GET", path, null, headers, MAX_DESCRIPTOR_BYTES);
    const now = this.clock();
    if (answer.status === 200) {
      let block: Uint8Array | null;
      try {
        block = blockFromHeader(answer.headers.get("ldp-signature"));
      } catch {
        block = new Uint8Array(0);
      }
      this.#descriptor = await checkDescriptor(answer.body, block, this.keys, this.spec, mine.seen.sequence, now)
        .catch((exc: unknown) => { throw trustRefusal(exc); });
      this.#etag = answer.headers.get("etag");
    } else if (answer.status !== 304 || this.#descriptor === null) {
      const [reason, detail] = refusal(answer);
      throw new EdgeError(answer.status, reason || "bad_answer", `GET ${path}: ${answer.status} ${reason}: ${detail}`);
    }
    const d = this.#descriptor;
    if (d.expires_ms < now) throw new SpecRefused("expired", `model version ${d.version} expired at ${d.expires_ms} ms`);
    if (this.#theta === null || this.#theta.sha256 !== d.sha256) {
      if (d.size > MAX_MODEL_BYTES) throw new SpecRefused("too_large", `a model of ${d.size} bytes (at most ${MAX_MODEL_BYTES})`);
      const bytesPath = `${path}/${d.version}`;
      let data: Uint8Array;
      try {
        const got = await this.client.request("GET", bytesPath, null, {}, d.size);
        if (got.status !== 200) {
          const [reason, detail] = refusal(got);
          throw new EdgeError(got.status, reason, `GET ${bytesPath}: ${got.status} ${reason}: ${detail}`);
        }
        data = got.body;
      } catch (exc) {
        if (exc instanceof EdgeError && exc.reason === "too_large") throw new SpecRefused("too_large", exc.message);
        throw exc;
      }
      try {
        this.#theta = { sha256: d.sha256, params: checkModelBytes(data, d, this.spec) };
      } catch (exc) {
        throw trustRefusal(exc);
      }
    }
    if (d.version > mine.seen.sequence) {
      mine.seen = { version: mine.seen.version, sequence: d.version };
      await this.state.save();
    }
    return [d, this.#theta.params];
  }

  async #lastSent(): Promise<number> {
    try {
      const text = await this.storage.get(`training-${this.spec.job_id}`);
      const v = text ? (JSON.parse(text) as { version?: unknown }).version : undefined;
      return typeof v === "number" && Number.isSafeInteger(v) ? v : -1;
    } catch {
      return -1;
    }
  }

  /** One update from the device's own `examples` at the current model version, charged and queued (module
   * documentation); its bytes, or null when the device already made one for this version. SpecRefused (nothing
   * charged: the job is done, frozen, or the model is not believed), BudgetExceeded (the ledger's caps), RangeError
   * (malformed examples), EdgeError (no answer), StateError (the charge cannot be kept). */
  train(examples: readonly Example[]): Promise<Uint8Array | null> {
    return this.#serial(async () => {
      const [d, theta] = await this.model();
      if (d.version <= (await this.#lastSent())) return null;
      const view = ledgerView(this.spec);
      const now = this.clock();
      this.ledger.check(view, now, [], this.policy, this.spec.epsilon, now);
      const body = computeUpdate(this.spec, d.version, theta, examples, this.random);
      await this.ledger.charge(view, now, [], this.policy, this.spec.epsilon, now);
      const stored: StoredReport = { version: d.version, timestampMs: now, madeMs: now, size: body.length,
                                     blocks: [{ attribute: 0, columns: [{ name: "update", dtype: "|u1", data: body }] }] };
      await this.outbox.add(stored);
      await this.storage.set(`training-${this.spec.job_id}`, JSON.stringify({ version: d.version }));
      return body;
    });
  }

  /** Send the queued updates (oldest first), each with retries and backoff; how many the edge took. */
  async flush(): Promise<number> {
    const credential = this.state.of(this.key).credential;
    if (credential === null) throw new StateError(`'${this.key}': no credential`);
    const path = `/v1/jobs/${encodeURIComponent(this.spec.job_id)}/updates`;
    const attempts = this.options.attempts ?? 6;
    const deadline = performance.now() + (this.options.flushTimeoutS ?? 120) * 1000;
    const sleep = this.options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
    await this.outbox.dropStale(this.clock());
    let taken = 0;
    for (const stored of [...this.outbox.pending()]) {
      const body = stored.blocks[0]?.columns[0]?.data;
      if (body === undefined) {
        await this.outbox.remove(new Set([stored]), "damaged");
        continue;
      }
      let verdict: string | null = null;
      for (let attempt = 1; attempt <= attempts && verdict === null; attempt++) {
        const left = deadline - performance.now();
        if (left <= 0) break;
        let retryAfter = 0;
        try {
          const answer = await this.client.request("POST", path, body, {
            "Content-Type": "application/msgpack",
            Authorization: authorization(credential.device, credential.key, "POST", path, body, this.clock()),
          }, MAX_ANSWER_BYTES, left);
          if (answer.status === 200) verdict = "admitted";
          else if (answer.status === 409 && refusal(answer)[0] === "duplicate") verdict = "duplicate";
          else if (answer.status >= 400 && answer.status < 500 && !RETRYABLE.has(answer.status)) verdict = refusal(answer)[0] || `http_${answer.status}`;
          else retryAfter = retryAfterSeconds(answer.headers.get("Retry-After"));
        } catch {
          // no answer: retried
        }
        if (verdict === null && attempt < attempts) {
          const wait = Math.min(1000 * backoffS(attempt, retryAfter, this.options.baseBackoffS ?? 0.2,
                                                this.options.maxBackoffS ?? 30, (this.options.random ?? Math.random)()),
                                deadline - performance.now());
          if (wait > 0) await sleep(wait);
        }
      }
      if (verdict === null) break; // kept for the next flush
      if (verdict === "admitted" || verdict === "duplicate") {
        await this.outbox.remove(new Set([stored]));
        this.delivered.set(verdict, (this.delivered.get(verdict) ?? 0) + 1);
        taken++;
      } else {
        await this.outbox.remove(new Set([stored]), verdict);
      }
    }
    return taken;
  }

  /** What became of this device's updates: delivered by verdict, dropped by reason, pending. */
  stats(): { delivered: Record<string, number>; dropped: Record<string, number>; pending: number } {
    return { delivered: Object.fromEntries(this.delivered), dropped: Object.fromEntries(this.outbox.reasons), pending: this.outbox.length };
  }

  /** The device's pseudonym in this job (what the edge and the coordinator see of it). */
  pseudonym(): bigint | null {
    const c = this.state.of(this.key).credential;
    return c === null ? null : devicePseudonym(c.collection, c.device);
  }
}
