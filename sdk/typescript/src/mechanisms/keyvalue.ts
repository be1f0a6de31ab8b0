/**
 * Key-value mechanisms (`ldpstream.mechanisms.keyvalue`): a device's set of (key code, value on [-1, 1]) pairs becomes
 * one report from which every key's frequency and mean value are estimated. PrivKV samples a key of the domain;
 * PCKV-UE and PCKV-GRR pad the set to l pairs and sample one (`padAndSample`). A record's pairs become those codes and
 * values here too (`truePairs`, which the collector calls), as only a spec with a key-value attribute has them.
 */

import {
  bernoulli, blake2b, checkEpsilon, checkInteger, column, FREQUENCY_MAX_EPSILON, type FreshMechanism, LDPError, leU64,
  MAX_DOMAIN_SIZE, type Random, randomizedResponseFromUniform, RecordError, type Report, unit, utf8,
} from "./shared.js";

/** What these mechanisms read of a key-value attribute (the spec's `KeyValueAttribute` is one): its name, its keys by
 * name or its number of buckets, and its values' range. */
export interface KeyValueDomain {
  name: string;
  keys: string[] | null;
  buckets: number | null;
  range: [number, number];
}

/** d: how many key codes a key-value attribute has (its keys, or its buckets). */
export function attributeDomain(a: KeyValueDomain): number {
  return a.keys !== null ? a.keys.length : (a.buckets as number);
}

/** One device's pairs: key codes 0..d-1 (each at most once) and their values on [-1, 1]. */
export interface Pairs {
  keys: number[];
  values: number[];
}

export function checkPairs(pairs: Pairs, domainSize: number): Pairs {
  if (pairs.keys.length !== pairs.values.length) throw new LDPError("keys and values differ in number");
  const seen = new Set<number>();
  pairs.keys.forEach((k, i) => {
    if (!Number.isInteger(k) || k < 0 || k >= domainSize) {
      throw new LDPError(`unknown key: codes must lie in 0..${domainSize - 1}`);
    }
    if (seen.has(k)) throw new LDPError("a device holds a key twice: a set has at most one value per key");
    seen.add(k);
    if (!(Math.abs(pairs.values[i]) <= 1.0)) throw new LDPError("values must lie in [-1, 1] (NaN is not a value)");
  });
  return pairs;
}

/** The code of a key of a key-value attribute: its index in `keys`, or its bucket (keyed BLAKE2b of the name). */
export function keyCode(a: KeyValueDomain, key: string): number {
  if (a.keys !== null) {
    const code = a.keys.indexOf(key);
    if (code < 0) throw new RecordError(`attribute '${a.name}': unknown key ${JSON.stringify(key)}`);
    return code;
  }
  const digest = blake2b(utf8(key), { digestSize: 8, key: utf8(a.name) });
  return Number(leU64(digest) % BigInt(a.buckets as number));
}

/** A key-value attribute's true value, {key: value} pairs (an object or a Map; keys by name or code), as its mechanism
 * takes it (`ldpstream.device.perturb.true_columns`); RecordError for anything else. */
export function truePairs(a: KeyValueDomain, value: unknown): Pairs {
  let entries: [unknown, unknown][];
  if (value instanceof Map) entries = [...value.entries()];
  else if (typeof value === "object" && value !== null && !Array.isArray(value)) entries = Object.entries(value);
  else throw new RecordError(`attribute '${a.name}': not pairs {key: value}`);
  const d = attributeDomain(a);
  const [lo, hi] = a.range;
  const keys: number[] = [], values: number[] = [];
  for (const [key, v] of entries) {
    const code = typeof key === "string" ? keyCode(a, key) : key;
    if (typeof code !== "number" || !Number.isInteger(code) || typeof v !== "number") {
      throw new RecordError(`attribute '${a.name}': pairs are {key: number}, not ${String(key)}: ${String(v)}`);
    }
    if (code < 0 || code >= d) throw new RecordError(`attribute '${a.name}': unknown key code ${code}`);
    if (keys.includes(code)) continue; // a second key of a bucket already held is dropped
    if (!(v >= lo && v <= hi)) throw new RecordError(`attribute '${a.name}': ${v} is outside its range [${lo}, ${hi}]`);
    keys.push(code);
    values.push(unit(lo, hi, v));
  }
  return { keys, values };
}

function discretize(v: number, rng: Random): number {
  return rng.uniform() < (1.0 + v) / 2.0 ? 1 : -1;
}

function flip(bit: number, keep: number, rng: Random): number {
  return rng.uniform() < keep ? bit : -bit;
}

export abstract class KeyValueMechanism implements FreshMechanism<Pairs> {
  abstract readonly name: string;
  readonly epsilon: number;
  readonly domainSize: number;

  constructor(epsilon: number, domainSize: number) {
    this.epsilon = checkEpsilon(epsilon);
    if (this.epsilon > FREQUENCY_MAX_EPSILON) throw new LDPError(`epsilon ${this.epsilon} is above the supported maximum 30`);
    this.domainSize = checkInteger("the number of keys", domainSize, 1, MAX_DOMAIN_SIZE);
  }

  abstract perturb(pairs: Pairs, rng: Random): Report;
}

export class PrivKV extends KeyValueMechanism {
  readonly name = "privkv";

  get p1(): number {
    return Math.exp(this.epsilon / 2) / (Math.exp(this.epsilon / 2) + 1);
  }

  get p2(): number {
    return this.p1;
  }

  perturb(pairs: Pairs, rng: Random): Report {
    checkPairs(pairs, this.domainSize);
    const sampled = rng.below(this.domainSize);
    const slot = pairs.keys.indexOf(sampled);
    const held = slot >= 0;
    const vstar = discretize(held ? pairs.values[slot] : 0, rng);
    const saysHeld = (rng.uniform() < this.p1) === held;
    const fair = bernoulli(rng, 0.5) ? 1 : -1;
    const value = held ? flip(vstar, this.p2, rng) : fair;
    return { key: column("<u4", sampled), value: column("|i1", saysHeld ? value : 0) };
  }
}

/** One of the device's pairs after padding the set with dummies (keys d, d + 1, ..., value 0) to at least l. */
export function padAndSample(pairs: Pairs, padding: number, domainSize: number, rng: Random): [number, number] {
  const count = pairs.keys.length;
  const size = Math.max(count, padding);
  const pick = Math.min(Math.floor(rng.uniform() * size), size - 1);
  return pick < count ? [pairs.keys[pick], pairs.values[pick]] : [domainSize + pick - count, 0.0];
}

abstract class PCKV extends KeyValueMechanism {
  readonly padding: number;

  constructor(epsilon: number, domainSize: number, padding = 1) {
    super(epsilon, domainSize);
    this.padding = checkInteger("padding length", padding, 1, 1024);
    if (this.domainSize + this.padding < 2) throw new LDPError("PCKV needs at least two keys with the dummies (d + l >= 2)");
  }

  get epsilonKey(): number {
    return Math.log((Math.exp(this.epsilon) + 1) / 2);
  }

  get p(): number {
    return Math.exp(this.epsilon) / (Math.exp(this.epsilon) + 1);
  }

  abstract get a(): number;
  abstract get b(): number;

  /** n Var[f_hat] of a key nobody holds (what `chooseKeyvalue` compares). */
  rareFrequencyVariance(): number {
    const a = this.a, b = this.b;
    const pi = b + 0 * (a - b);
    const xx = b ** 2 + pi * (1 - 2 * b);
    return xx / ((1.0 / this.padding) * (a - b)) ** 2;
  }
}

export class PCKVUE extends PCKV {
  readonly name = "pckv-ue";

  get a(): number {
    return 0.5;
  }

  get b(): number {
    return 1.0 / (Math.exp(this.epsilonKey) + 1);
  }

  perturb(pairs: Pairs, rng: Random): Report {
    checkPairs(pairs, this.domainSize);
    const d = this.domainSize, b = this.b;
    const [key, value] = padAndSample(pairs, this.padding, d, rng);
    const vstar = discretize(value, rng);
    const bits: number[] = new Array(d);
    for (let i = 0; i < d; i++) {
      const u = rng.uniform();
      bits[i] = u < b / 2 ? 1 : u < b ? -1 : 0;
    }
    if (key < d) {
      const w = rng.uniform(), a = this.a;
      bits[key] = w < a * this.p ? vstar : w < a ? -vstar : 0;
    }
    return { bits: { dtype: "|i1", values: bits } };
  }
}

export class PCKVGRR extends PCKV {
  readonly name = "pckv-grr";

  get a(): number {
    const e1 = Math.exp(this.epsilonKey);
    return e1 / (e1 + this.domainSize + this.padding - 1);
  }

  get b(): number {
    return 1.0 / (Math.exp(this.epsilonKey) + this.domainSize + this.padding - 1);
  }

  perturb(pairs: Pairs, rng: Random): Report {
    checkPairs(pairs, this.domainSize);
    const [key, value] = padAndSample(pairs, this.padding, this.domainSize, rng);
    const vstar = discretize(value, rng);
    const u = rng.uniform();
    const a = this.a;
    const outKey = randomizedResponseFromUniform(key, this.domainSize + this.padding, a, u);
    const fair = bernoulli(rng, 0.5) ? 1 : -1;
    return { key: column("<u4", outKey), value: column("|i1", u < a ? flip(vstar, this.p, rng) : fair) };
  }
}

export function makeKeyvalue(name: string, epsilon: number, domainSize: number, padding: number): KeyValueMechanism {
  if (name === "privkv") return new PrivKV(epsilon, domainSize);
  if (name === "pckv-ue") return new PCKVUE(epsilon, domainSize, padding);
  if (name === "pckv-grr") return new PCKVGRR(epsilon, domainSize, padding);
  throw new LDPError(`unknown key-value mechanism ${JSON.stringify(name)}`);
}

/** A key-value attribute's mechanism at eps per report, "auto" resolved (the collector's, `ldpstream.contract.collector`). */
export function attributeMechanism(a: KeyValueDomain & { mechanism: string; padding: number }, eps: number): KeyValueMechanism {
  const d = attributeDomain(a);
  return makeKeyvalue(a.mechanism === "auto" ? chooseKeyvalue(eps, d, a.padding) : a.mechanism, eps, d, a.padding);
}

/** "auto" of a key-value attribute: the PCKV variant of least variance for a rare key (`choose_keyvalue`). */
export function chooseKeyvalue(epsilon: number, domainSize: number, padding: number): string {
  const grr = new PCKVGRR(epsilon, domainSize, padding).rareFrequencyVariance();
  const ue = new PCKVUE(epsilon, domainSize, padding).rareFrequencyVariance();
  return ue < grr ? "pckv-ue" : "pckv-grr";
}
