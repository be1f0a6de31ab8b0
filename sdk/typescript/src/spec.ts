/**
 * Collection specs (`ldpstream.contract.spec`): the JSON the admin signs and the edge serves, validated field by
 * field as the Python models do (unknown fields refused, every constraint checked; each object's fields in a table,
 * `Schema`), then as a whole, so that a device refuses what a Python device refuses (`malformed_spec`). Only JSON is
 * read: a spec is served as the canonical JSON it was signed as.
 */

import { fromUtf8 } from "./bytes.js";
import { LDPError, SpecError } from "./errors.js";
import { FREQUENCY } from "./mechanisms/frequency.js";
import { DISTRIBUTION_PARAMETERS, distribution, longitudinal, LONGITUDINAL_KIND } from "./mechanisms/optional.js";
import { NUMERIC } from "./mechanisms/numeric.js";
import {
  FACTORIZATION, HEAVY_HITTER_NAMES, KEYVALUE_NAMES, MAX_SPEC_SIZE, MAX_WINDOW_SECONDS, NOMINAL_BUDGETS, WORKLOAD_NAMES,
} from "./rules.js";

export const NAME = /^[a-z][a-z0-9_\-]{0,62}$/;
const WINDOW = /^(\d+)([smhd])$/;
const UNIT_SECONDS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };
// The names, bounds and limits, generated from the Python contract (rules.ts, tests/vectors/spec_rules.py).
export { FACTORIZATION, HEAVY_HITTER_NAMES, KEYVALUE_NAMES } from "./rules.js";

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
  /** How long after a window's end the edge still admits its reports, seconds (null: the edge's default rule). */
  grace_s: number | null;
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
  if (m === null) throw new SpecError(`window ${JSON.stringify(window)} is not like 30s, 15m, 1h, 1d`);
  return Number(m[1]) * UNIT_SECONDS[m[2]];
}

type Json = unknown;
type Path = (string | number)[];

function isObject(x: Json): x is Record<string, Json> {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

function isNumber(x: Json): x is number {
  return typeof x === "number" && Number.isFinite(x);
}

function isInt(x: Json): x is number {
  return typeof x === "number" && Number.isSafeInteger(x);
}

/** Note a problem with where it is (pydantic's loc). */
function note(problems: string[], at: Path, message: string): void {
  problems.push(`${at.join(".")}: ${message}`);
}

/** What is wrong with a field's value, if anything. */
type Check = (value: Json) => string | undefined;

/** A field: its check (or the fields of a nested object), and its default when absent (none: the field is required;
 * null: null is taken as well). */
type Field = [check: Check | Schema, fallback?: Json];

interface Schema {
  [field: string]: Field;
}

/** The fields of an object by `schema`, defaults filled in, every problem noted (unknown fields are problems). */
function read(data: Json, schema: Schema, at: Path, problems: string[]): Record<string, Json> {
  const out: Record<string, Json> = {};
  if (!isObject(data)) {
    note(problems, at, "not an object");
    return out;
  }
  for (const key of Object.keys(data)) if (!Object.hasOwn(schema, key)) note(problems, [...at, key], "unknown field");
  for (const [key, [check, fallback]] of Object.entries(schema)) {
    const v = data[key], where = [...at, key];
    if (v === undefined) {
      if (fallback === undefined) note(problems, where, "required");
      out[key] = structuredClone(fallback); // a default of its own: a caller may change what it gets
    } else if (v === null && fallback === null) out[key] = null;
    else if (typeof check === "object") out[key] = read(v, check, where, problems);
    else {
      const problem = check(v);
      if (problem !== undefined) note(problems, where, problem);
      out[key] = v;
    }
  }
  return out;
}

const anything: Check = () => undefined;

/** A string of `min` to `max` code points matching `pattern`. */
const text = (pattern?: RegExp, min = 0, max = Infinity): Check => (v) => {
  if (typeof v !== "string") return "not a string";
  if (pattern && !pattern.test(v)) return `does not match ${pattern.source}`;
  const length = [...v].length;
  if (length < min) return `shorter than ${min}`;
  if (length > max) return `longer than ${max}`;
};

/** An integer in [lo, hi], or a finite number in (lo, hi]. */
const number = (integer: boolean, lo = -Infinity, hi = Infinity): Check => (v) => {
  if (!(integer ? isInt(v) : isNumber(v))) return `not ${integer ? "an integer" : "a number"}`;
  const n = v as number;
  if (integer ? n < lo : !(n > lo)) return `${integer ? "below" : "not above"} ${lo}`;
  if (n > hi) return `above ${hi}`;
};

/** One of `known` (a `kind`). */
const oneOf = (kind: string, known: readonly string[]): Check => (v) => {
  if (typeof v !== "string") return "not a string";
  if (!known.includes(v)) return `unknown ${kind} ${JSON.stringify(v)}; known: ${known.join(", ")}`;
};

/** A list of at least `min` distinct strings. */
const distinct = (min: number): Check => (v) => {
  if (!Array.isArray(v) || !v.every((x) => typeof x === "string")) return "not a list of strings";
  if (v.length < min) return `fewer than ${min} items`;
  if (new Set(v).size !== v.length) return "items repeat";
};

const range: Check = (v) => {
  if (!Array.isArray(v) || v.length !== 2 || !v.every(isNumber)) return "a range is [lo, hi]";
  const [lo, hi] = v;
  if (!(lo < hi && Number.isFinite(hi - lo))) return `a range is [lo, hi] with lo < hi (and hi - lo finite)`;
};

const parameters: Check = (v) => {
  if (!isObject(v)) return "not an object";
  for (const [k, x] of Object.entries(v)) {
    if ([...k].length > 32) return "a parameter name is longer than 32";
    if (!isNumber(x)) return "a parameter is not a number";
  }
};

const windows: Check = (v) => {
  if (!Array.isArray(v) || !v.every((w) => typeof w === "string")) return "not a list of strings";
  const bad = v.find((w) => w !== "all" && !(WINDOW.test(w) && windowSeconds(w) > 0 && windowSeconds(w) <= MAX_WINDOW_SECONDS));
  if (bad !== undefined) return `window ${JSON.stringify(bad)} is not like 30s, 15m, 1h, 1d, all`;
};

/** The distribution mechanisms a numeric attribute may name (`registry.DISTRIBUTION`), sorted. */
// rules.ts lists names sorted.
const DISTRIBUTION_NAMES = Object.keys(DISTRIBUTION_PARAMETERS);
const memoized = (kind: string) => Object.keys(LONGITUDINAL_KIND).filter((n) => LONGITUDINAL_KIND[n] === kind);

// What an analyst reads about an attribute (the console's catalogue), and what the simulator draws from: checked as
// Python checks them, otherwise unused on a device (and dropped from the attribute). One line of plain text each.
const PLAIN_TEXT = /^[^\x00-\x1f\x7f]*$/u;
const UNUSED = ["description", "unit", "distribution", "zipf_exponent", "pairs_per_device", "distinct"];
const COMMON: Schema = {
  name: [text(NAME)], type: [anything], description: [text(PLAIN_TEXT, 1, 500), null], unit: [text(PLAIN_TEXT, 1, 32), null],
};
const ZIPF: Field = [number(false), 1.1];

/** The fields of each type of attribute. */
const ATTRIBUTES: Record<string, Schema> = {
  numeric: {
    ...COMMON, range: [range],
    mechanism: [oneOf("numeric mechanism", ["auto", ...Object.keys(NUMERIC).sort(), ...memoized("numeric"), ...DISTRIBUTION_NAMES]), "auto"],
    parameters: [parameters, {}], distribution: [oneOf("distribution", ["gaussian", "uniform", "power_law"]), "gaussian"],
  },
  categorical: {
    ...COMMON, values: [distinct(2)],
    mechanism: [oneOf("frequency oracle", ["auto", FACTORIZATION, ...Object.keys(FREQUENCY).sort(), ...memoized("frequency")]), "auto"],
    parameters: [parameters, {}], workload: [oneOf("workload", WORKLOAD_NAMES), null], strategy: [text(/^[0-9a-f]{64}$/), null],
    zipf_exponent: ZIPF,
  },
  keyvalue: {
    ...COMMON, keys: [distinct(1), null], buckets: [number(true, 1, 1 << 16), null], range: [range],
    mechanism: [oneOf("key-value mechanism", ["auto", ...KEYVALUE_NAMES]), "auto"], padding: [number(true, 1, 1024), 1],
    pairs_per_device: [number(false, 0, 1024), 2.0], zipf_exponent: ZIPF,
  },
  string: {
    ...COMMON, max_length: [number(true, 1, 64)], alphabet: [text(undefined, 1, 95), null],
    mechanism: [oneOf("heavy-hitter mechanism", ["auto", ...HEAVY_HITTER_NAMES]), "auto"], top: [number(true, 1, 1000), 20],
    distinct: [number(true, 1, 1_000_000), 1000], zipf_exponent: ZIPF,
  },
};

/** The fields of a spec. */
const SPEC: Schema = {
  name: [text(NAME)], version: [number(true, 1)], epsilon: [number(false, 0, 50)],
  attributes: [(v) => (!Array.isArray(v) ? "not a list" : v.length ? undefined : "empty")],
  privacy: [{ per_report: [number(false, 0, 50)], lifetime: [number(false, 0, 500)], values: [number(true, 1, 1000), 1] }, null],
  shuffle: [{
    delta: [(v) => number(false, 0)(v) ?? ((v as number) < 1e-3 ? undefined : "not below 0.001")],
    min_batch: [number(true, 100, 100_000_000), 10_000], grace_s: [number(true, 0, 3600), 60],
  }, null],
  sampling: [(v) => (v === "auto" || v === "one" || v === "split" || (isInt(v) && v >= 1) ? undefined
    : "not auto, one, split or an integer >= 1"), "auto"],
  windows: [windows, ["1h"]], one_report_per_window: [(v) => (typeof v === "boolean" ? undefined : "not true or false"), true], partitions: [number(true, 1, 1024), 8],
  description: [text(), ""], grace_s: [number(true, 0, 7 * 86_400), null],
};

function parseAttribute(raw: Json, at: Path, problems: string[]): Attribute | undefined {
  const type = isObject(raw) ? raw.type : undefined;
  if (!isObject(raw)) note(problems, at, "not an object");
  else if (!(typeof type === "string" && Object.hasOwn(ATTRIBUTES, type))) {
    note(problems, at, "type is not numeric, categorical, keyvalue or string");
  } else {
    const a = read(raw, ATTRIBUTES[type], [...at, type], problems);
    for (const key of UNUSED) delete a[key];
    return a as unknown as Attribute;
  }
}

function validated(data: Record<string, Json>): CollectionSpec {
  if (isObject(data.privacy)) { // epsilon is privacy.per_report (it may repeat it, equal)
    const perReport = data.privacy.per_report;
    if (!("epsilon" in data)) data = { ...data, epsilon: perReport };
    else if (data.epsilon !== perReport) {
      throw new SpecError(`<root>: epsilon ${String(data.epsilon)} is not privacy.per_report ${String(perReport)}`);
    }
  }
  const problems: string[] = [];
  const spec = read(data, SPEC, [], problems) as unknown as CollectionSpec;
  if (Array.isArray(spec.attributes)) {
    spec.attributes = spec.attributes.map((a, i) => parseAttribute(a, ["attributes", i], problems)) as Attribute[]; // if no problems
  }
  if (problems.length) throw new SpecError(problems.join("; "));
  spec.windows = [...new Set(spec.windows)].filter((w) => w !== "all").sort((a, b) => windowSeconds(a) - windowSeconds(b));
  const error = consistency(spec);
  if (error !== undefined) throw new SpecError(`<root>: ${error}`);
  return spec;
}

/** Why an attribute's parameters cannot be taken (undefined if they can): they go with a named memoized or
 * distribution mechanism, built at nominal budgets (a distribution mechanism at the per-report one). */
function parameterError(mechanism: string, parameters: Record<string, number>, domain: number | null): string | undefined {
  const isDistribution = Object.hasOwn(DISTRIBUTION_PARAMETERS, mechanism);
  if (!(mechanism in LONGITUDINAL_KIND) && !isDistribution) {
    return `parameters go with a named memoized mechanism (${Object.keys(LONGITUDINAL_KIND).join(", ")}) or distribution mechanism (${DISTRIBUTION_NAMES.join(", ")}), not '${mechanism}'`;
  }
  try {
    if (isDistribution) distribution().makeDistribution(mechanism, NOMINAL_BUDGETS[1], parameters);
    else longitudinal().makeLongitudinal(mechanism, ...NOMINAL_BUDGETS, domain, parameters);
  } catch (exc) {
    if (exc instanceof LDPError) return exc.message;
    throw exc;
  }
}

/** What is wrong with an attribute as a whole (its fields each valid), if anything. */
function attributeError(a: Attribute): string | undefined {
  if (a.type === "categorical") {
    if ((a.mechanism === FACTORIZATION) !== (a.workload !== null)) return `a workload goes with ${FACTORIZATION}, and only with it`;
    if (a.strategy !== null && a.mechanism !== FACTORIZATION) return `a strategy goes with ${FACTORIZATION} only`;
  }
  if (a.type === "keyvalue" && (a.keys === null) === (a.buckets === null)) {
    return "either keys or buckets, not both or neither";
  }
  if ((a.type === "numeric" || a.type === "categorical") && Object.keys(a.parameters).length) {
    return parameterError(a.mechanism, a.parameters, a.type === "categorical" ? a.values.length : null);
  }
}

/** What is wrong with a spec as a whole (its fields each valid), if anything. */
function consistency(spec: CollectionSpec): string | undefined {
  const { privacy, attributes } = spec;
  if (privacy !== null && privacy.per_report > privacy.lifetime / privacy.values) {
    return `per_report ${privacy.per_report} exceeds lifetime / values`;
  }
  const names = attributes.map((a) => a.name);
  if (new Set(names).size !== names.length) return `attribute names must be distinct: ${names.join(", ")}`;
  if (typeof spec.sampling === "number" && spec.sampling > attributes.length) {
    return `sampling k = ${spec.sampling} exceeds the ${attributes.length} attributes`;
  }
  for (const a of attributes) {
    const error = attributeError(a);
    if (error) return `attribute '${a.name}': ${error}`;
  }
  const named = (test: (a: Attribute) => boolean) => attributes.filter(test).map((a) => a.name).join(", ");
  const keyvalue = named((a) => a.type === "keyvalue");
  if (privacy !== null && keyvalue) return `keyvalue attributes ${keyvalue} cannot keep a lifetime budget`;
  const strings = named((a) => a.type === "string");
  if (privacy !== null && strings) return `string attributes ${strings} have no memoized mechanism`;
  if (spec.shuffle !== null && spec.grace_s !== null) return "a shuffled collection's grace is shuffle.grace_s: drop grace_s";
  if (spec.shuffle !== null && !(spec.windows.length && spec.one_report_per_window)) {
    return "shuffle needs windows and one_report_per_window";
  }
  const memoizedNames = named((a) => a.mechanism in LONGITUDINAL_KIND);
  if (privacy === null && memoizedNames) {
    return `attributes ${memoizedNames} are memoized: they need a privacy block`;
  }
  const fresh = named((a) => !(a.mechanism in LONGITUDINAL_KIND) && a.mechanism !== "auto");
  if (privacy !== null && fresh) return `attributes ${fresh} use fresh noise per report: a lifetime budget needs memoized ones`;
}

/** A spec from its JSON bytes or text; SpecError with the problems found, and nothing else, whatever the input. */
export function parseSpec(data: Uint8Array | string, source = "<spec>"): CollectionSpec {
  try {
    if (data.length > MAX_SPEC_SIZE) throw new SpecError(`more than ${MAX_SPEC_SIZE} bytes or characters`);
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
      throw new SpecError("not JSON");
    }
    if (!isObject(value)) throw new SpecError("a spec is an object");
    return validated(value);
  } catch (exc) {
    if (exc instanceof SpecError) throw new SpecError(`${source}: ${exc.message}`);
    throw new SpecError(`${source}: not a valid spec (${String(exc)})`);
  }
}
