/**
 * The app's privacy policy (`ldpstream.device.policy`): what a device accepts, whatever the collector asks. The same
 * fields and defaults as the Python SDK, spelled in camelCase:
 *
 * - `maxEpsilonPerReport` = 8: the largest per-donation budget Apple publishes (2017).
 * - `maxEpsilonPerDay` = 16, over every collection of the device together (Tang et al., 2017).
 * - `maxLifetimePerCollection` = 8: what the device may ever spend on one collection (keyed by name).
 * - `maxLifetimePerDevice` = 32: the sum of the lifetimes committed to over every collection it ever accepted.
 * - `allowedMechanisms`: every mechanism this SDK implements; an app may narrow it.
 *
 * `judge` holds a spec against the policy, computing what it really spends with the device's own collector; a refused
 * spec charges nothing and sends nothing.
 */

import { Collector, type Strategies } from "./collector.js";
import { LDPError, PolicyError, SpecError } from "./errors.js";
import { fsum } from "./fsum.js";
import { FREQUENCY } from "./mechanisms/frequency.js";
import { DISTRIBUTION_PARAMETERS, LONGITUDINAL_KIND } from "./mechanisms/optional.js";
import { NUMERIC } from "./mechanisms/numeric.js";
import { POLICY_DEFAULTS } from "./rules.js";
import { type CollectionSpec, FACTORIZATION, HEAVY_HITTER_NAMES, KEYVALUE_NAMES } from "./spec.js";

const BUDGET_RTOL = 1e-9;

export const EVERY_MECHANISM: readonly string[] = Object.freeze([
  ...Object.keys(NUMERIC), ...Object.keys(FREQUENCY), ...Object.keys(LONGITUDINAL_KIND), ...KEYVALUE_NAMES,
  ...HEAVY_HITTER_NAMES, FACTORIZATION, ...Object.keys(DISTRIBUTION_PARAMETERS),
  "privunitg", "projunit", // a training job's (protocol 13.1), run by the "@ldpstream/device/training" entry point
].sort());

/** The policy an app passes to `Device.join` (every field optional: the defaults above). */
export interface PolicyOptions {
  /** The largest epsilon one report may spend (default 8). */
  maxEpsilonPerReport?: number;
  /** The most the device spends in a UTC day, over every collection (default 16). */
  maxEpsilonPerDay?: number;
  /** The most the device ever spends on one collection, by name (default 8). */
  maxLifetimePerCollection?: number;
  /** The most the device commits over all the collections it accepts (default 32). */
  maxLifetimePerDevice?: number;
  /** The mechanisms the app allows (default: every one this SDK implements). */
  allowedMechanisms?: readonly string[];
}

export interface PrivacyPolicy {
  readonly maxEpsilonPerReport: number;
  readonly maxEpsilonPerDay: number;
  readonly maxLifetimePerCollection: number;
  readonly maxLifetimePerDevice: number;
  readonly allowedMechanisms: readonly string[];
}

export const DEFAULT_POLICY: PrivacyPolicy = Object.freeze({ ...POLICY_DEFAULTS, allowedMechanisms: EVERY_MECHANISM });

/** A field as the Python SDK spells it: maxEpsilonPerDay is max_epsilon_per_day. */
const snakeCase = (field: string) => field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** A policy from its options (camelCase, or the Python SDK's snake_case names); PolicyError naming a bad field. */
export function makePolicy(options: PolicyOptions | Record<string, unknown> = {}): PrivacyPolicy {
  if (typeof options !== "object" || options === null || Array.isArray(options)) throw new PolicyError("a policy is an object");
  const fields = Object.keys(DEFAULT_POLICY);
  const values: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(options)) {
    const field = fields.find((f) => f === key || snakeCase(f) === key);
    if (field === undefined) throw new PolicyError(`unknown policy field ${JSON.stringify(key)} (known: ${fields.join(", ")})`);
    values[field] = value;
  }
  const policy = { ...DEFAULT_POLICY, ...values } as PrivacyPolicy;
  for (const field of fields.filter((f) => f !== "allowedMechanisms") as (keyof PrivacyPolicy)[]) {
    const v = policy[field];
    if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) throw new PolicyError(`${field} must be a finite number > 0, not ${String(v)}`);
  }
  const allowed = policy.allowedMechanisms;
  if (!Array.isArray(allowed) || !allowed.every((m) => typeof m === "string")) {
    throw new PolicyError("allowedMechanisms is a list of mechanism names");
  }
  const unknown = allowed.filter((m) => !EVERY_MECHANISM.includes(m)).sort();
  if (unknown.length) throw new PolicyError(`allowedMechanisms: unknown ${unknown.join(", ")}`);
  if (policy.maxLifetimePerCollection > policy.maxLifetimePerDevice) {
    throw new PolicyError("maxLifetimePerCollection cannot exceed maxLifetimePerDevice");
  }
  return Object.freeze({ ...policy, allowedMechanisms: Object.freeze([...new Set(allowed)].sort()) });
}

/** Whether a device accepts a spec; if not, the rule it breaks (`code`) and why; if so, the lifetime it commits. */
export interface Verdict {
  accepted: boolean;
  code: string;
  reason: string;
  commitment: number;
}

function refuse(code: string, reason: string): Verdict {
  return { accepted: false, code, reason, commitment: 0.0 };
}

/** What accepting the spec reserves: its lifetime budget, or the policy's per-collection cap for a spec without one. */
export function commitment(spec: CollectionSpec, policy: PrivacyPolicy): number {
  return spec.privacy !== null ? spec.privacy.lifetime : policy.maxLifetimePerCollection;
}

/** Accept the spec under the policy, given the lifetimes committed by collection name; or refuse it (first rule). */
export function judge(spec: CollectionSpec, policy: PrivacyPolicy, committed: Readonly<Record<string, number>>,
                      strategies?: Strategies): Verdict {
  let budgets;
  try {
    budgets = new Collector(spec, strategies).privacyBudgets();
  } catch (exc) {
    if (exc instanceof SpecError || exc instanceof LDPError) {
      return refuse("policy_unbuildable", `the spec's mechanisms cannot be built or break its budget: ${exc.message}`);
    }
    throw exc;
  }
  /** A refusal if `value` (what it is) exceeds the policy's cap `field`. */
  const over = (code: string, what: string, value: number, field: Exclude<keyof PrivacyPolicy, "allowedMechanisms">) =>
    value > policy[field] * (1 + BUDGET_RTOL) ? refuse(code, `${what} (${value}) exceeds the policy's ${field} (${policy[field]})`) : null;
  const perReport = budgets.per_report;
  const refused = [...new Set(Object.values(budgets.attributes).map((a) => a.mechanism))]
    .filter((m) => !policy.allowedMechanisms.includes(m)).sort();
  const wanted = commitment(spec, policy);
  const needed = Math.max(committed[spec.name] ?? 0.0, wanted);
  const others = fsum(Object.entries(committed).filter(([name]) => name !== spec.name).map(([, v]) => v));
  return over("policy_epsilon_per_report", "epsilon per report", perReport, "maxEpsilonPerReport")
    ?? over("policy_epsilon_per_day", "epsilon per report", perReport, "maxEpsilonPerDay")
    ?? (refused.length ? refuse("policy_mechanism", `mechanisms ${refused.join(", ")} are not in the policy's allowedMechanisms`) : null)
    ?? over("policy_lifetime_per_collection", "the spec's lifetime budget", wanted, "maxLifetimePerCollection")
    ?? over("policy_lifetime_per_device", `the lifetime committed over the device's collections with '${spec.name}'`,
            others + needed, "maxLifetimePerDevice")
    ?? { accepted: true, code: "", reason: "", commitment: needed };
}
