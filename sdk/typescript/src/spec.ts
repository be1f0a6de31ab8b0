/**
 * Collection specs (`ldpstream.contract.spec`): the JSON the admin signs and the edge serves, validated field by
 * field as the Python models do (unknown fields refused, every constraint checked), so that a device refuses what a
 * Python device refuses (`malformed_spec`). Only JSON is read: a spec is served as the canonical JSON it was signed as.
 */

import { fromUtf8 } from "./bytes.js";
import { LDPError, SpecError } from "./errors.js";
import { FREQUENCY } from "./mechanisms/frequency.js";
import { DISTRIBUTION_PARAMETERS, distribution, longitudinal, LONGITUDINAL_KIND } from "./mechanisms/optional.js";
import { NUMERIC } from "./mechanisms/numeric.js";

export const NAME = /^[a-z][a-z0-9_\-]{0,62}$/;
const WINDOW = /^(\d+)([smhd])$/;
const UNIT_SECONDS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };
export const MAX_SPEC_SIZE = 256 * 1024;
const MAX_WINDOW_SECONDS = 3650 * 86400;
export const FACTORIZATION = "factorization";
const WORKLOAD_NAMES = ["histogram", "prefix", "all_range", "all_marginals", "3way_marginals", "parity"];
export const KEYVALUE_NAMES = ["privkv", "pckv-ue", "pckv-grr"];
export const HEAVY_HITTER_NAMES = ["hcms_tree", "pem", "sfp"];
const NOMINAL_BUDGETS: [number, number] = [2.0, 1.0];

export interface NumericAttribute {
  name: string;
  type: "numeric";
  range: [number, number];
  mechanism: string;
  parameters: Record<string, number>;
}

export interface CategoricalAttribute {
  name: string;
  type: "categorical";
  values: string[];
  mechanism: string;
  parameters: Record<string, number>;
  workload: string | null;
  strategy: string | null;
}

export interface KeyValueAttribute {
  name: string;
  type: "keyvalue";
  keys: string[] | null;
  buckets: number | null;
  range: [number, number];
  mechanism: string;
  padding: number;
}

export interface StringAttribute {
  name: string;
  type: "string";
  max_length: number;
  alphabet: string | null;
  mechanism: string;
  top: number;
}

export type Attribute = NumericAttribute | CategoricalAttribute | KeyValueAttribute | StringAttribute;

export interface Privacy {
  per_report: number;
  lifetime: number;
  values: number;
}

export interface CollectionSpec {
  name: string;
  version: number;
  epsilon: number;
  attributes: Attribute[];
  privacy: Privacy | null;
  /** A shuffled collection: the edge forwards its reports anonymous to the shuffler (nothing changes on the device). */
  shuffle: Shuffle | null;
  sampling: "auto" | "one" | "split" | number;
  /** Tumbling windows, shortest first ("all" dropped: the all-time window is always kept). */
  windows: string[];
  one_report_per_window: boolean;
  partitions: number;
  description: string;
}

export interface Shuffle {
  delta: number;
  min_batch: number;
  grace_s: number;
}

export function specKey(spec: CollectionSpec): string {
  return `${spec.name}@${spec.version}`;
}

export function windowSeconds(window: string): number {
  const m = WINDOW.exec(window);
  if (m === null) throw new SpecError(`window ${JSON.stringify(window)} is not like 30s, 15m, 1h or 1d`);
  return Number(m[1]) * UNIT_SECONDS[m[2]];
}

/** The distribution mechanisms a numeric attribute may name (`registry.DISTRIBUTION`), sorted. */
export function distributionNames(): string[] {
  return Object.keys(DISTRIBUTION_PARAMETERS).sort();
}

export function longitudinalNames(kind: "frequency" | "numeric"): string[] {
  return Object.keys(LONGITUDINAL_KIND).filter((n) => LONGITUDINAL_KIND[n] === kind).sort();
}

/** Problems found while validating, with where they are (pydantic's loc). */
class Problems {
  readonly list: string[] = [];

  add(where: (string | number)[], message: string): void {
    this.list.push(`${where.join(".") || "<root>"}: ${message}`);
  }
}

type Json = unknown;

function isObject(x: Json): x is Record<string, Json> {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

function isNumber(x: Json): x is number {
  return typeof x === "number" && Number.isFinite(x);
}

function isInt(x: Json): x is number {
  return typeof x === "number" && Number.isSafeInteger(x);
}

/** Where a boolean stands for something else, or something else for the boolean field (as Python's check). */
function misplacedBooleans(value: Json, where: string): string[] {
  if (isObject(value)) {
    const found: string[] = [];
    for (const [key, item] of Object.entries(value)) {
      const at = where ? `${where}.${key}` : key;
      if (key === "one_report_per_window" && !where.startsWith("attributes")) {
        if (typeof item !== "boolean") found.push(`${at}: a boolean (true or false)`);
      } else found.push(...misplacedBooleans(item, at));
    }
    return found;
  }
  if (Array.isArray(value)) return value.flatMap((item, i) => misplacedBooleans(item, `${where}.${i}`));
  return typeof value === "boolean" ? [`${where}: a boolean where something else belongs`] : [];
}

class Reader {
  constructor(readonly data: Record<string, Json>, readonly where: (string | number)[], readonly problems: Problems,
              allowed: string[]) {
    for (const key of Object.keys(data)) {
      if (!allowed.includes(key)) problems.add([...where, key], "Extra inputs are not permitted");
    }
  }

  private fail(field: string, message: string): undefined {
    this.problems.add([...this.where, field], message);
    return undefined;
  }

  has(field: string): boolean {
    return field in this.data && this.data[field] !== undefined;
  }

  string(field: string, options: { pattern?: RegExp; min?: number; max?: number; fallback?: string | null } = {}): string | null | undefined {
    if (!this.has(field)) {
      if ("fallback" in options) return options.fallback;
      return this.fail(field, "Field required");
    }
    const v = this.data[field];
    if (v === null && options.fallback === null) return null;
    if (typeof v !== "string") return this.fail(field, "Input should be a valid string");
    if (options.pattern && !options.pattern.test(v)) return this.fail(field, `String should match pattern '${options.pattern.source}'`);
    if (options.min !== undefined && [...v].length < options.min) return this.fail(field, `String should have at least ${options.min} characters`);
    if (options.max !== undefined && [...v].length > options.max) return this.fail(field, `String should have at most ${options.max} characters`);
    return v;
  }

  number(field: string, options: { gt?: number; ge?: number; le?: number; fallback?: number | null; integer?: boolean } = {}): number | null | undefined {
    if (!this.has(field)) {
      if ("fallback" in options) return options.fallback;
      return this.fail(field, "Field required");
    }
    const v = this.data[field];
    if (v === null && options.fallback === null) return null;
    if (options.integer ? !isInt(v) : !isNumber(v)) {
      return this.fail(field, options.integer ? "Input should be a valid integer" : "Input should be a valid number");
    }
    const n = v as number;
    if (options.gt !== undefined && !(n > options.gt)) return this.fail(field, `Input should be greater than ${options.gt}`);
    if (options.ge !== undefined && !(n >= options.ge)) return this.fail(field, `Input should be greater than or equal to ${options.ge}`);
    if (options.le !== undefined && !(n <= options.le)) return this.fail(field, `Input should be less than or equal to ${options.le}`);
    return n;
  }

  range(field: string): [number, number] | undefined {
    if (!this.has(field)) return this.fail(field, "Field required");
    const v = this.data[field];
    if (!Array.isArray(v) || v.length !== 2 || !v.every(isNumber)) return this.fail(field, "a range is [lo, hi]");
    const [lo, hi] = v as [number, number];
    if (!(lo < hi && Number.isFinite(hi - lo))) {
      return this.fail(field, `range must be [lo, hi] with lo < hi (and hi - lo finite), got [${lo}, ${hi}]`);
    }
    return [lo, hi];
  }

  strings(field: string, min: number, fallback?: null): string[] | null | undefined {
    if (!this.has(field) || (this.data[field] === null && fallback === null)) {
      if (fallback === null) return null;
      return this.fail(field, "Field required");
    }
    const v = this.data[field];
    if (!Array.isArray(v) || !v.every((x) => typeof x === "string")) return this.fail(field, "Input should be a list of strings");
    if (v.length < min) return this.fail(field, `List should have at least ${min} items`);
    return v as string[];
  }

  mechanism(field: string, kind: string, known: string[]): string | undefined {
    const v = this.string(field, { fallback: "auto" });
    if (v === undefined || v === null) return undefined;
    if (!known.includes(v)) return this.fail(field, `unknown ${kind} ${JSON.stringify(v)}; known: ${known.join(", ")}`);
    return v;
  }

  parameters(field: string): Record<string, number> | undefined {
    if (!this.has(field)) return {};
    const v = this.data[field];
    if (!isObject(v)) return this.fail(field, "Input should be a valid dictionary");
    for (const [k, x] of Object.entries(v)) {
      if ([...k].length > 32) return this.fail(field, "a parameter name has at most 32 characters");
      if (!isNumber(x)) return this.fail(field, "parameters are numbers");
    }
    return v as Record<string, number>;
  }
}

function numericNames(): string[] {
  return ["auto", ...Object.keys(NUMERIC).sort(), ...longitudinalNames("numeric"), ...distributionNames()];
}

function frequencyNames(): string[] {
  return ["auto", FACTORIZATION, ...Object.keys(FREQUENCY).sort(), ...longitudinalNames("frequency")];
}

// What an analyst reads about an attribute (the console's catalogue), optional: checked as Python checks them and
// otherwise unused on a device. One line of plain text each.
const PLAIN_TEXT = /^[^\x00-\x1f\x7f]*$/u;

function annotations(r: Reader): void {
  r.string("description", { pattern: PLAIN_TEXT, min: 1, max: 500, fallback: null });
  r.string("unit", { pattern: PLAIN_TEXT, min: 1, max: 32, fallback: null });
}

function parseAttribute(raw: Json, at: (string | number)[], problems: Problems): Attribute | undefined {
  if (!isObject(raw)) {
    problems.add(at, "Input should be a valid dictionary");
    return undefined;
  }
  const type = raw.type;
  const before = problems.list.length;
  const common = ["name", "type", "description", "unit"];
  if (type === "numeric") {
    const r = new Reader(raw, [...at, "numeric"], problems, [...common, "range", "mechanism", "parameters", "distribution"]);
    const name = r.string("name", { pattern: NAME });
    annotations(r);
    const range = r.range("range");
    const mechanism = r.mechanism("mechanism", "numeric mechanism", numericNames());
    const parameters = r.parameters("parameters");
    const distribution = r.string("distribution", { fallback: "gaussian" });
    if (distribution !== undefined && !["gaussian", "uniform", "power_law"].includes(distribution as string)) {
      problems.add([...at, "numeric", "distribution"], "Input should be 'gaussian', 'uniform' or 'power_law'");
    }
    if (problems.list.length > before) return undefined;
    return { name: name as string, type, range: range!, mechanism: mechanism!, parameters: parameters! };
  }
  if (type === "categorical") {
    const r = new Reader(raw, [...at, "categorical"], problems,
                         [...common, "values", "mechanism", "parameters", "workload", "strategy", "zipf_exponent"]);
    const name = r.string("name", { pattern: NAME });
    annotations(r);
    const values = r.strings("values", 2);
    if (values && new Set(values).size !== values.length) problems.add([...at, "categorical", "values"], "categorical values must be distinct");
    const mechanism = r.mechanism("mechanism", "frequency oracle", frequencyNames());
    const parameters = r.parameters("parameters");
    const workload = r.string("workload", { fallback: null });
    const strategy = r.string("strategy", { pattern: /^[0-9a-f]{64}$/, fallback: null });
    r.number("zipf_exponent", { fallback: 1.1 });
    if (problems.list.length > before) return undefined;
    const where = [...at, "categorical"];
    if ((mechanism === FACTORIZATION) !== (workload !== null)) {
      problems.add(where, `a workload goes with mechanism '${FACTORIZATION}', and only with it`);
    } else if (strategy !== null && mechanism !== FACTORIZATION) {
      problems.add(where, `a strategy goes with mechanism '${FACTORIZATION}' only`);
    } else if (workload !== null && !WORKLOAD_NAMES.includes(workload as string)) {
      problems.add(where, `unknown workload ${JSON.stringify(workload)}; known: ${WORKLOAD_NAMES.join(", ")}`);
    }
    if (problems.list.length > before) return undefined;
    return { name: name as string, type, values: values!, mechanism: mechanism!, parameters: parameters!,
             workload: workload as string | null, strategy: strategy as string | null };
  }
  if (type === "keyvalue") {
    const r = new Reader(raw, [...at, "keyvalue"], problems,
                         [...common, "keys", "buckets", "range", "mechanism", "padding", "pairs_per_device", "zipf_exponent"]);
    const name = r.string("name", { pattern: NAME });
    annotations(r);
    const keys = r.strings("keys", 1, null);
    if (keys && new Set(keys).size !== keys.length) problems.add([...at, "keyvalue", "keys"], "keys must be distinct");
    const buckets = r.number("buckets", { integer: true, ge: 1, le: 1 << 16, fallback: null });
    const range = r.range("range");
    const mechanism = r.mechanism("mechanism", "key-value mechanism", ["auto", ...KEYVALUE_NAMES]);
    const padding = r.number("padding", { integer: true, ge: 1, le: 1024, fallback: 1 });
    r.number("pairs_per_device", { gt: 0, le: 1024, fallback: 2.0 });
    r.number("zipf_exponent", { fallback: 1.1 });
    if (problems.list.length > before) return undefined;
    if ((keys === null) === (buckets === null)) {
      problems.add([...at, "keyvalue"], "a keyvalue attribute has either a list of keys or a number of buckets (open domain)");
      return undefined;
    }
    return { name: name as string, type, keys: keys as string[] | null, buckets: buckets as number | null, range: range!,
             mechanism: mechanism!, padding: padding as number };
  }
  if (type === "string") {
    const r = new Reader(raw, [...at, "string"], problems,
                         [...common, "max_length", "alphabet", "mechanism", "top", "distinct", "zipf_exponent"]);
    const name = r.string("name", { pattern: NAME });
    annotations(r);
    const maxLength = r.number("max_length", { integer: true, ge: 1, le: 64 });
    const alphabet = r.string("alphabet", { min: 1, max: 95, fallback: null });
    const mechanism = r.mechanism("mechanism", "heavy-hitter mechanism", ["auto", ...HEAVY_HITTER_NAMES]);
    const top = r.number("top", { integer: true, ge: 1, le: 1000, fallback: 20 });
    r.number("distinct", { integer: true, ge: 1, le: 1_000_000, fallback: 1000 });
    r.number("zipf_exponent", { fallback: 1.1 });
    if (problems.list.length > before) return undefined;
    return { name: name as string, type, max_length: maxLength as number, alphabet: alphabet as string | null,
             mechanism: mechanism!, top: top as number };
  }
  problems.add(at, "Unable to extract tag using discriminator 'type' (numeric, categorical, keyvalue, string)");
  return undefined;
}

function domainOf(a: Attribute): number {
  if (a.type === "keyvalue") return a.keys !== null ? a.keys.length : (a.buckets as number);
  return a.type === "categorical" ? a.values.length : 0;
}

export function attributeDomain(a: KeyValueAttribute): number {
  return domainOf(a);
}

/** Why an attribute's parameters cannot be taken (null if they can): they go with a named memoized or distribution
 * mechanism, built at nominal budgets (a distribution mechanism at the per-report one). */
function parameterError(mechanism: string, parameters: Record<string, number>, domain: number | null): string | null {
  const isDistribution = Object.hasOwn(DISTRIBUTION_PARAMETERS, mechanism);
  if (!(mechanism in LONGITUDINAL_KIND) && !isDistribution) {
    return `parameters go with a named memoized mechanism (${Object.keys(LONGITUDINAL_KIND).sort().join(", ")}) or distribution mechanism (${distributionNames().join(", ")}), not '${mechanism}'`;
  }
  try {
    if (isDistribution) distribution().makeDistribution(mechanism, NOMINAL_BUDGETS[1], parameters);
    else longitudinal().makeLongitudinal(mechanism, ...NOMINAL_BUDGETS, domain, parameters);
  } catch (exc) {
    if (exc instanceof LDPError) return exc.message;
    throw exc;
  }
  return null;
}

function validated(data: Record<string, Json>): CollectionSpec {
  const misplaced = misplacedBooleans(data, "");
  if (misplaced.length) throw new SpecError(misplaced.join("; "));
  const problems = new Problems();
  if (isObject(data.privacy)) { // epsilon is privacy.per_report (it may repeat it, equal)
    const perReport = data.privacy.per_report;
    if (!("epsilon" in data)) data = { ...data, epsilon: perReport };
    else if (data.epsilon !== perReport) {
      throw new SpecError(`<root>: epsilon ${String(data.epsilon)} and privacy.per_report ${String(perReport)} differ: state one`);
    }
  }
  const r = new Reader(data, [], problems, ["name", "version", "epsilon", "attributes", "privacy", "shuffle", "sampling",
                                            "windows", "one_report_per_window", "partitions", "description"]);
  const name = r.string("name", { pattern: NAME });
  const version = r.number("version", { integer: true, ge: 1 });
  const epsilon = r.number("epsilon", { gt: 0, le: 50 });
  let attributes: Attribute[] | undefined;
  if (!Array.isArray(data.attributes)) problems.add(["attributes"], data.attributes === undefined ? "Field required" : "Input should be a valid list");
  else if (data.attributes.length < 1) problems.add(["attributes"], "List should have at least 1 item");
  else {
    const parsed = data.attributes.map((a, i) => parseAttribute(a, ["attributes", i], problems));
    if (parsed.every((a) => a !== undefined)) attributes = parsed as Attribute[];
  }
  let privacy: Privacy | null = null;
  if (data.privacy !== undefined && data.privacy !== null) {
    if (!isObject(data.privacy)) problems.add(["privacy"], "Input should be a valid dictionary");
    else {
      const p = new Reader(data.privacy, ["privacy"], problems, ["per_report", "lifetime", "values"]);
      const perReport = p.number("per_report", { gt: 0, le: 50 });
      const lifetime = p.number("lifetime", { gt: 0, le: 500 });
      const values = p.number("values", { integer: true, ge: 1, le: 1000, fallback: 1 });
      if (perReport != null && lifetime != null && values != null) {
        if (perReport > lifetime / values) {
          problems.add(["privacy"], `one report (per_report = ${perReport}) cannot cost more than one value's share of the lifetime budget`);
        } else privacy = { per_report: perReport, lifetime, values };
      }
    }
  }
  let shuffle: Shuffle | null = null;
  if (data.shuffle !== undefined && data.shuffle !== null) {
    if (!isObject(data.shuffle)) problems.add(["shuffle"], "Input should be a valid dictionary");
    else {
      const h = new Reader(data.shuffle, ["shuffle"], problems, ["delta", "min_batch", "grace_s"]);
      const delta = h.number("delta", { gt: 0 });
      const minBatch = h.number("min_batch", { integer: true, ge: 100, le: 100_000_000, fallback: 10_000 });
      const grace = h.number("grace_s", { integer: true, ge: 0, le: 3600, fallback: 60 });
      if (delta != null && delta >= 1e-3) problems.add(["shuffle", "delta"], "Input should be less than 0.001");
      else if (delta != null && minBatch != null && grace != null) shuffle = { delta, min_batch: minBatch, grace_s: grace };
    }
  }
  let sampling: CollectionSpec["sampling"] = "auto";
  if (data.sampling !== undefined) {
    const s = data.sampling;
    if (s === "auto" || s === "one" || s === "split") sampling = s;
    else if (isInt(s) && s >= 1) sampling = s;
    else problems.add(["sampling"], "sampling is auto, one, split or an integer >= 1");
  }
  let windows = ["1h"];
  if (data.windows !== undefined) {
    if (!Array.isArray(data.windows) || !data.windows.every((w) => typeof w === "string")) {
      problems.add(["windows"], "Input should be a list of strings");
    } else {
      const bad = (data.windows as string[]).find((w) => w !== "all" && (!WINDOW.test(w) || !(windowSeconds(w) > 0 && windowSeconds(w) <= MAX_WINDOW_SECONDS)));
      if (bad !== undefined) problems.add(["windows"], `window ${JSON.stringify(bad)} is not like 30s, 15m, 1h, 1d or 'all'`);
      else windows = [...new Set(data.windows as string[])].filter((w) => w !== "all").sort((a, b) => windowSeconds(a) - windowSeconds(b));
    }
  }
  const oneReport = data.one_report_per_window === undefined ? true : (data.one_report_per_window as boolean);
  const partitions = r.number("partitions", { integer: true, ge: 1, le: 1024, fallback: 8 });
  const description = r.string("description", { fallback: "" });
  if (problems.list.length) throw new SpecError(problems.list.join("; "));
  const spec: CollectionSpec = {
    name: name as string, version: version as number, epsilon: epsilon as number, attributes: attributes!, privacy, shuffle,
    sampling, windows, one_report_per_window: oneReport, partitions: partitions as number, description: description as string,
  };
  const error = consistency(spec);
  if (error !== null) throw new SpecError(`<root>: ${error}`);
  return spec;
}

function consistency(spec: CollectionSpec): string | null {
  const names = spec.attributes.map((a) => a.name);
  if (new Set(names).size !== names.length) return `attribute names must be distinct: ${names.join(", ")}`;
  if (typeof spec.sampling === "number" && spec.sampling > spec.attributes.length) {
    return `sampling k = ${spec.sampling} exceeds the ${spec.attributes.length} attributes`;
  }
  const keyvalue = spec.attributes.filter((a) => a.type === "keyvalue").map((a) => a.name);
  if (spec.privacy !== null && keyvalue.length) return `keyvalue attributes ${keyvalue.join(", ")} cannot keep a lifetime budget`;
  const strings = spec.attributes.filter((a) => a.type === "string").map((a) => a.name);
  if (spec.privacy !== null && strings.length) return `string attributes ${strings.join(", ")} have no memoized mechanism`;
  if (spec.shuffle !== null && !(spec.windows.length && spec.one_report_per_window)) {
    return "a shuffled collection needs windows and one report per device per window";
  }
  const memoized = spec.attributes.filter((a) => a.mechanism in LONGITUDINAL_KIND).map((a) => a.name);
  if (spec.privacy === null && memoized.length) {
    return `attributes ${memoized.join(", ")} name memoized mechanisms, which need a privacy block {per_report, lifetime}`;
  }
  for (const a of spec.attributes) {
    if ((a.type === "numeric" || a.type === "categorical") && Object.keys(a.parameters).length) {
      const error = parameterError(a.mechanism, a.parameters, a.type === "categorical" ? a.values.length : null);
      if (error) return `attribute '${a.name}': ${error}`;
    }
  }
  const fresh = spec.attributes.filter((a) => !(a.mechanism in LONGITUDINAL_KIND) && a.mechanism !== "auto").map((a) => a.name);
  if (spec.privacy !== null && fresh.length) {
    return `attributes ${fresh.join(", ")} use mechanisms with fresh noise per report: a lifetime budget needs memoized ones`;
  }
  return null;
}

/** A spec from its JSON bytes or text; SpecError with the problems found, and nothing else, whatever the input. */
export function parseSpec(data: Uint8Array | string, source = "<spec>"): CollectionSpec {
  try {
    if (data.length > MAX_SPEC_SIZE) throw new SpecError(`${data.length} characters or bytes; a spec has at most ${MAX_SPEC_SIZE}`);
    let text: string;
    try {
      text = typeof data === "string" ? data : fromUtf8(data);
    } catch {
      throw new SpecError("not valid UTF-8");
    }
    let value: Json;
    try {
      value = JSON.parse(text);
    } catch {
      throw new SpecError("not valid JSON (a device reads the JSON a spec is published as)");
    }
    if (!isObject(value)) throw new SpecError(`a spec is a mapping, got ${Array.isArray(value) ? "list" : typeof value}`);
    return validated(value);
  } catch (exc) {
    if (exc instanceof SpecError) throw new SpecError(`${source}: ${exc.message}`);
    throw new SpecError(`${source}: not a valid spec (${String(exc)})`);
  }
}
