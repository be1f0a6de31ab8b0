/**
 * A spec's collector on the device (`ldpstream.contract.collector`, `ldpstream.mechanisms.mixed`): k of the d
 * attributes per report (fresh from the device's randomness, or fixed by its secret when the spec has a lifetime
 * budget), each perturbed at eps / k by the mechanism the spec names or "auto" resolves to, exactly as the Python
 * collector resolves it; and `privacyBudgets`, what a device spends, which the policy judges.
 */

import { utf8 } from "./bytes.js";
import { LDPError, RecordError, SpecError } from "./errors.js";
import { leU64, nameKey, sha256 } from "./hashes.js";
import type { FreshMechanism, MemoizedMechanism, Report } from "./mechanisms/base.js";
import type { FactorizationMechanism } from "./mechanisms/factorization.js";
import { checkCode, chooseFrequency, makeFrequency } from "./mechanisms/frequency.js";
import { DISTRIBUTION_PARAMETERS, distribution, keyvalue, longitudinal, LONGITUDINAL_KIND, strings } from "./mechanisms/optional.js";
import { chooseSampled, makeNumeric, NUMERIC, unit } from "./mechanisms/numeric.js";
import type { Random } from "./random.js";
import {
  type Attribute, type CollectionSpec, FACTORIZATION, HEAVY_HITTER_NAMES, specKey,
} from "./spec.js";

const BUDGET_RTOL = 1e-9;

/** Factorization strategies by content hash. */
export type Strategies = ReadonlyMap<string, FactorizationMechanism>;

/** A true record: each attribute's value (a number, a category name or code, a string, or {key: value} pairs). */
export type TrueRecord = Record<string, unknown>;

/** A memo a report reads (`ldpstream.device.ledger.Memo`): its key, and the eps_inf its first read costs. */
export interface Memo {
  key: string;
  epsilon: number;
  /** Its name before memo naming m1 (`ldpstream.device.ledger.Memo.legacy`), which an older ledger may hold. */
  legacy?: string;
}

interface Plan {
  index: number;
  attribute: Attribute;
  nameKey: bigint;
  fresh?: FreshMechanism<unknown>;
  memoized?: MemoizedMechanism<number>;
}

export interface AttributeBudget {
  mechanism: string;
  one_report: number;
  per_value: number | null;
  parameters: Record<string, number> | null;
}

export interface PrivacyBudgets {
  per_report: number;
  lifetime: number | null;
  values: number | null;
  attributes: Record<string, AttributeBudget>;
}

/** One attribute's perturbed report. */
export interface AttributeReport {
  attribute: number;
  report: Report;
}

export function sampledAttributes(epsilon: number, dims: number): number {
  return Math.max(1, Math.min(dims, Math.floor(epsilon / 2.5)));
}

/** k: how many of the spec's attributes each report carries. */
export function sampledCount(spec: CollectionSpec): number {
  const d = spec.attributes.length;
  if (spec.sampling === "auto") return sampledAttributes(spec.epsilon, d);
  if (spec.sampling === "one") return 1;
  if (spec.sampling === "split") return d;
  return spec.sampling;
}

/** The content hashes of the strategies the spec's factorization attributes pin. */
export function pinnedStrategies(spec: CollectionSpec): string[] {
  const hashes: string[] = [];
  for (const a of spec.attributes) {
    if (a.type === "categorical" && a.mechanism === FACTORIZATION) {
      if (a.strategy === null) throw new SpecError(`${specKey(spec)}: attribute '${a.name}' pins no strategy yet`);
      hashes.push(a.strategy);
    }
  }
  return hashes;
}

/** The public seed of a string attribute's hashes: sha256("collection/attribute")[:8], little-endian. */
export function hashSeed(collection: string, attribute: string): bigint {
  return leU64(sha256(utf8(`${collection}/${attribute}`)));
}

export class Collector {
  readonly k: number;
  readonly dims: number;
  readonly lifetime: number | null;
  readonly plans: Plan[];

  constructor(readonly spec: CollectionSpec, strategies: Strategies = new Map()) {
    const missing = pinnedStrategies(spec).filter((h) => !strategies.has(h));
    if (missing.length) throw new SpecError(`${specKey(spec)}: strategies ${missing.map((h) => h.slice(0, 12)).join(", ")} not loaded`);
    this.dims = spec.attributes.length;
    this.k = sampledCount(spec);
    if (this.k < 1 || this.k > this.dims) throw new LDPError(`cannot sample k = ${this.k} of d = ${this.dims} attributes`);
    this.lifetime = spec.privacy === null ? null : spec.privacy.lifetime / spec.privacy.values;
    this.plans = spec.attributes.map((a, index) => ({ index, attribute: a, nameKey: nameKey(a.name),
                                                      ...this.#mechanism(a, strategies) }));
  }

  #mechanism(a: Attribute, strategies: Strategies): Pick<Plan, "fresh" | "memoized"> {
    const spec = this.spec;
    const eps = spec.epsilon / this.k;
    if (a.type === "keyvalue") {
      if (this.lifetime !== null) throw new LDPError(`attribute '${a.name}': no memoized key-value mechanism`);
      return { fresh: keyvalue().attributeMechanism(a, eps) as FreshMechanism<unknown> };
    }
    if (a.type === "string") {
      if (this.lifetime !== null) throw new LDPError(`attribute '${a.name}': no memoized heavy-hitter mechanism`);
      return { fresh: strings().attributeMechanism(a, eps, hashSeed(spec.name, a.name), HEAVY_HITTER_NAMES) as FreshMechanism<unknown> };
    }
    if (a.type === "categorical" && a.mechanism === FACTORIZATION) {
      if (this.lifetime !== null) throw new LDPError(`attribute '${a.name}': no memoized factorization`);
      const mech = strategies.get(a.strategy as string) as FactorizationMechanism;
      return { fresh: mech.forAttribute(a.name, a.values.length, eps) as FreshMechanism<unknown> };
    }
    if (this.lifetime !== null) {
      const domain = a.type === "categorical" ? a.values.length : null;
      return { memoized: longitudinal().attributeMechanism(a, domain, this.lifetime / this.k, eps) };
    }
    if (a.mechanism in LONGITUDINAL_KIND) throw new LDPError(`attribute '${a.name}': '${a.mechanism}' needs a lifetime budget`);
    if (a.type === "numeric" && Object.hasOwn(DISTRIBUTION_PARAMETERS, a.mechanism)) {
      return { fresh: distribution().makeDistribution(a.mechanism, eps, a.parameters) as FreshMechanism<unknown> };
    }
    if (Object.keys(a.parameters).length) throw new LDPError(`attribute '${a.name}': parameters go with memoized mechanisms`);
    if (a.type === "categorical") {
      const oracle = a.mechanism === "auto" ? chooseFrequency(eps, a.values.length) : a.mechanism;
      return { fresh: makeFrequency(oracle, eps, a.values.length) as FreshMechanism<unknown> };
    }
    const name = a.mechanism === "auto" ? chooseSampled(spec.epsilon, this.dims, this.k) : a.mechanism;
    if (!(name in NUMERIC)) throw new LDPError(`attribute '${a.name}': '${name}' is not a numeric mechanism`);
    return { fresh: makeNumeric(name, eps) as FreshMechanism<unknown> };
  }

  /** Per attribute, the name of the mechanism its reports use ("auto" resolved). */
  resolved(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const p of this.plans) out[p.attribute.name] = (p.fresh ?? p.memoized)!.name;
    return out;
  }

  /** What a device spends (`ldpstream.contract.collector.privacy_budgets`); SpecError if a mechanism spends more. */
  privacyBudgets(): PrivacyBudgets {
    const spec = this.spec, k = this.k;
    const attributes: Record<string, AttributeBudget> = {};
    for (const p of this.plans) {
      const mech = (p.fresh ?? p.memoized)!;
      const perValue = spec.privacy !== null && p.memoized ? p.memoized.epsilonLifetime : null;
      const parameters = p.memoized ? (p.memoized as unknown as { parameters(): Record<string, number> }).parameters() : null;
      attributes[p.attribute.name] = { mechanism: mech.name, one_report: mech.epsilon, per_value: perValue, parameters };
      if (mech.epsilon > (spec.epsilon / k) * (1 + BUDGET_RTOL)) {
        throw new SpecError(`${specKey(spec)}: ${p.attribute.name}'s ${mech.name} spends over eps / k`);
      }
      if (spec.privacy !== null && !(perValue !== null && perValue <= (spec.privacy.lifetime / spec.privacy.values / k) * (1 + BUDGET_RTOL))) {
        throw new SpecError(`${specKey(spec)}: ${p.attribute.name}'s ${mech.name} breaks the lifetime bound`);
      }
    }
    return { per_report: spec.epsilon, lifetime: spec.privacy?.lifetime ?? null, values: spec.privacy?.values ?? null,
             attributes };
  }

  /** The record as the mechanisms take it, every attribute validated (RecordError) before any is sampled. */
  inputs(record: TrueRecord): unknown[] {
    const names = new Set(this.plans.map((p) => p.attribute.name));
    const missing = this.plans.filter((p) => !(p.attribute.name in record)).map((p) => p.attribute.name);
    const unknown = Object.keys(record).filter((n) => !names.has(n)).sort();
    if (missing.length || unknown.length) {
      throw new RecordError(`${specKey(this.spec)}: missing attributes [${missing.join(", ")}], unknown [${unknown.join(", ")}]`);
    }
    return this.plans.map((p) => trueValue(p.attribute, record[p.attribute.name]));
  }

  /** The k attributes this device reports: fresh, or fixed by its collection secret (keyed by the names). */
  sampled(rng: Random, secret: bigint | null): number[] {
    const d = this.dims, k = this.k;
    if (k === d) return this.plans.map((p) => p.index);
    if (secret === null) {
      const pool = this.plans.map((p) => p.index);
      for (let i = 0; i < k; i++) {
        const j = i + rng.below(d - i);
        [pool[i], pool[j]] = [pool[j], pool[i]];
      }
      return pool.slice(0, k).sort((a, b) => a - b);
    }
    // a secret goes with memoized mechanisms: loaded
    return longitudinal().keyedSample(secret, this.plans.map((p) => p.nameKey), k);
  }

  /** The memos a report of `record` reads (a spec with a privacy block), named as the Python ledger names them. */
  memos(record: TrueRecord, secret: bigint): Memo[] {
    const inputs = this.inputs(record);
    return this.sampled(null as unknown as Random, secret).map((i) => {
      const p = this.plans[i], mech = p.memoized!;
      return longitudinal().memoOf(p.attribute.name, mech, mech.memoKey(inputs[i] as number,
                                                                         longitudinal().attributeSecret(secret, p.nameKey)));
    });
  }

  /** One report of `record`: the sampled attributes' reports (with the collection secret when memoized). */
  perturb(record: TrueRecord, rng: Random, secret: bigint | null): AttributeReport[] {
    if ((secret === null) !== (this.lifetime === null)) {
      throw new RecordError(`${specKey(this.spec)}: a secret goes with a privacy block, and only with it`);
    }
    const inputs = this.inputs(record);
    return this.sampled(rng, secret).map((i) => {
      const p = this.plans[i];
      const report = p.memoized
        ? p.memoized.perturb(inputs[i] as number, rng, longitudinal().attributeSecret(secret as bigint, p.nameKey))
        : p.fresh!.perturb(inputs[i], rng);
      return { attribute: i, report };
    });
  }
}

/** One attribute's true value as its mechanism takes it (`ldpstream.device.perturb.true_columns`). */
export function trueValue(a: Attribute, value: unknown): unknown {
  if (a.type === "numeric") {
    const [lo, hi] = a.range;
    if (typeof value !== "number" || !(value >= lo && value <= hi)) {
      throw new RecordError(`attribute '${a.name}': ${typeof value === "number" ? value : typeof value} is not a number in [${lo}, ${hi}]`);
    }
    return unit(lo, hi, value);
  }
  if (a.type === "categorical") {
    if (typeof value === "string") {
      const code = a.values.indexOf(value);
      if (code < 0) throw new RecordError(`attribute '${a.name}': unknown category ${JSON.stringify(value)}`);
      return code;
    }
    if (typeof value === "number" && Number.isInteger(value)) {
      try {
        return checkCode(value, a.values.length);
      } catch {
        throw new RecordError(`attribute '${a.name}': unknown category code ${value}`);
      }
    }
    throw new RecordError(`attribute '${a.name}': not a category or its code`);
  }
  return a.type === "string" ? strings().trueString(a, value) : keyvalue().truePairs(a, value);
}
