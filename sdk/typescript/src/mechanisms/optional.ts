/**
 * The mechanisms most specs never name load on demand, so a page loads only what its collection needs: the memoized
 * (longitudinal) ones, the key-value ones, the heavy-hitter ones over strings, the factorization strategies, and the
 * distribution mechanisms a numeric attribute may name (Square Wave, hierarchical histograms).
 * `loadMechanisms(needsOf(specBytes))` brings in what a spec names (the device does it when it has verified a spec,
 * before it parses it); `mechanisms/all.js` registers every one at once (tools and tests). Their names and the
 * distribution mechanisms' parameters are in the core (`rules.ts`, generated; re-exported here), for validation and the policy
 * (the memoized ones' parameters are checked in their module).
 */

import { LDPError } from "../errors.js";
import { DISTRIBUTION_PARAMETERS, LONGITUDINAL_KIND } from "../rules.js";
import type * as Distribution from "./distribution.js";
import type * as Factorization from "./factorization.js";
import type * as KeyValue from "./keyvalue.js";
import type * as Longitudinal from "./longitudinal.js";
import type * as Strings from "./strings.js";

/** The memoized mechanisms' kinds; the distribution mechanisms a numeric attribute may name, and the parameters a spec
 * may give them (`registry.DISTRIBUTION`, their classes' `parameter_names()`): generated from the Python registry. */
export { DISTRIBUTION_PARAMETERS, LONGITUDINAL_KIND };

export interface Needs {
  longitudinal?: boolean;
  keyvalue?: boolean;
  strings?: boolean;
  factorization?: boolean;
  distribution?: boolean;
}

interface Modules {
  longitudinal?: typeof Longitudinal;
  keyvalue?: typeof KeyValue;
  strings?: typeof Strings;
  factorization?: typeof Factorization;
  distribution?: typeof Distribution;
}

export const modules: Modules = {};

function need<K extends keyof Modules>(name: K): NonNullable<Modules[K]> {
  const m = modules[name];
  if (m === undefined) throw new LDPError(`the ${name} mechanisms are not loaded (loadMechanisms)`);
  return m as NonNullable<Modules[K]>;
}

export const longitudinal = (): typeof Longitudinal => need("longitudinal");
export const keyvalue = (): typeof KeyValue => need("keyvalue");
export const strings = (): typeof Strings => need("strings");
export const factorization = (): typeof Factorization => need("factorization");
export const distribution = (): typeof Distribution => need("distribution");

const LOADERS: { [K in keyof Modules]-?: () => Promise<Modules[K]> } = {
  longitudinal: () => import("./longitudinal.js"), keyvalue: () => import("./keyvalue.js"),
  strings: () => import("./strings.js"), factorization: () => import("./factorization.js"),
  distribution: () => import("./distribution.js"),
};

/** Load the modules `needs` names (each once). */
export async function loadMechanisms(needs: Needs): Promise<void> {
  for (const [name, load] of Object.entries(LOADERS) as [keyof Modules, () => Promise<unknown>][]) {
    if (needs[name] && !modules[name]) Object.assign(modules, { [name]: await load() });
  }
}

/** A factorization strategy from its .npz bytes, checked against its pinned hash (the module loaded on demand). */
export async function strategyFromNpz(data: Uint8Array, hash: string): Promise<Factorization.FactorizationMechanism> {
  await loadMechanisms({ factorization: true });
  return factorization().FactorizationMechanism.fromNpz(data, hash);
}

/** What a spec's text names (a guess that errs towards loading: the text is parsed for this only). */
export function needsOf(text: string): Needs {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    return {};
  }
  const spec = (typeof data === "object" && data !== null ? data : {}) as { privacy?: unknown; attributes?: unknown };
  const attributes = (Array.isArray(spec.attributes) ? spec.attributes : []) as Record<string, unknown>[];
  const named = (m: unknown) => typeof m === "string" && m in LONGITUDINAL_KIND;
  const distribution = (m: unknown) => typeof m === "string" && Object.hasOwn(DISTRIBUTION_PARAMETERS, m);
  return {
    longitudinal: (spec.privacy !== undefined && spec.privacy !== null)
      || attributes.some((a) => a !== null && (named(a.mechanism) || (a.parameters !== undefined && !distribution(a.mechanism)))),
    keyvalue: attributes.some((a) => a?.type === "keyvalue"),
    strings: attributes.some((a) => a?.type === "string"),
    factorization: attributes.some((a) => a?.mechanism === "factorization"),
    distribution: attributes.some((a) => distribution(a?.mechanism)),
  };
}
