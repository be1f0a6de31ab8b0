/**
 * Strings over an open domain (`ldpstream.mechanisms.open_domain`): fixed-width padded byte rows, their seeded public
 * hashes, and the heavy-hitter mechanisms a `type: string` attribute names: `hcms_tree` and `pem` (prefix trees of
 * sketches; one level per device) and `sfp` (Apple's sequence fragment puzzle).
 */

import {
  checkFrequencyEpsilon, column, type FreshMechanism, GAMMA, hadamardBit, LDPError, MASK64, mix64, type Random,
  randomizedResponse, RecordError, type Report, utf8,
} from "./shared.js";

const MAX_STRING_BYTES = 64;
const PRINTABLE = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ \t\n\r";

export class StringDomain {
  readonly maxLength: number;
  readonly alphabet: string | null;
  readonly symbols: number;
  private readonly allowed: Uint8Array;

  constructor(maxLength: number, alphabet: string | null = null) {
    if (!Number.isInteger(maxLength) || maxLength < 1 || maxLength > MAX_STRING_BYTES) {
      throw new LDPError(`max_length must be in [1, ${MAX_STRING_BYTES}], got ${maxLength}`);
    }
    this.maxLength = maxLength;
    this.alphabet = alphabet;
    this.allowed = new Uint8Array(256);
    if (alphabet === null) {
      this.allowed.fill(1, 1);
      this.symbols = 255;
    } else {
      const chars = [...alphabet];
      if (!chars.length || new Set(chars).size !== chars.length) {
        throw new LDPError("an alphabet is a non-empty string of distinct characters");
      }
      if (!chars.every((c) => PRINTABLE.includes(c))) throw new LDPError("an alphabet holds printable ASCII characters only");
      for (const c of chars) this.allowed[c.charCodeAt(0)] = 1;
      this.symbols = chars.length;
    }
  }

  /** The padded row of a string (UTF-8, zeros after it); LDPError for an empty, over-long or foreign string. */
  encode(value: string): Uint8Array {
    if (typeof value !== "string") throw new LDPError("values must be strings");
    const bytes = utf8(value);
    if (bytes.length === 0) throw new LDPError("empty string");
    if (bytes.length > this.maxLength) {
      throw new LDPError(`string of ${bytes.length} bytes is longer than the maximum ${this.maxLength}`);
    }
    for (const b of bytes) {
      if (b === 0) throw new LDPError("string holds a NUL byte");
      if (!this.allowed[b]) throw new LDPError("string holds bytes outside the alphabet");
    }
    const row = new Uint8Array(this.maxLength);
    row.set(bytes);
    return row;
  }
}

/** A seeded 64-bit fingerprint of a row's first `length` bytes (little-endian words folded by mix64). */
export function prefixFingerprint(row: Uint8Array, length: number, seed: bigint): bigint {
  let state = mix64(seed & MASK64);
  const words = Math.ceil(length / 8);
  for (let w = 0; w < words; w++) {
    let word = 0n;
    for (let i = 7; i >= 0; i--) {
      const at = 8 * w + i;
      word = (word << 8n) | BigInt(at < length ? row[at] : 0);
    }
    state = mix64(state ^ word);
  }
  return state;
}

export function hashSalts(seed: bigint, hashes: number): bigint[] {
  const base = seed & MASK64;
  return Array.from({ length: hashes }, (_, j) => mix64(base + GAMMA * BigInt(j + 1)));
}

/** h_j(x) in [0, width): Lemire's multiply-shift of the high 32 bits of mix64(fingerprint ^ salt). */
export function bucket(fingerprint: bigint, salt: bigint, width: number): number {
  const high = mix64(fingerprint ^ salt) >> 32n;
  return Number((high * BigInt(width)) >> 32n);
}

const MAX_SKETCH_CELLS = 1 << 22;

/** A sketch oracle of one prefix length: the device side of HCMS and hashed GRR. */
abstract class SketchOracle {
  readonly epsilon: number;
  readonly hashes: number;
  readonly width: number;
  readonly seed: bigint;
  readonly prefixLength: number;
  readonly salts: bigint[];

  constructor(epsilon: number, domain: StringDomain, hashes: number, width: number, seed: bigint, prefixLength: number | null) {
    this.epsilon = checkFrequencyEpsilon(epsilon);
    if (!Number.isInteger(hashes) || hashes < 1 || hashes > 1 << 16) throw new LDPError(`hashes must be in [1, 65536]`);
    if (!Number.isInteger(width) || width < 2 || width > MAX_SKETCH_CELLS) {
      throw new LDPError(`width must be an integer in [2, ${MAX_SKETCH_CELLS}], got ${width}`);
    }
    if (hashes * width > MAX_SKETCH_CELLS) throw new LDPError(`hashes x width = ${hashes * width} is above ${MAX_SKETCH_CELLS} cells`);
    this.hashes = hashes;
    this.width = width;
    this.seed = seed;
    this.prefixLength = prefixLength ?? domain.maxLength;
    if (this.prefixLength < 1 || this.prefixLength > domain.maxLength) throw new LDPError("prefix_length out of range");
    this.salts = hashSalts(seed, hashes);
  }

  /** The oracle's columns for a row: "hash" (the j drawn) and the variant's. */
  perturbRow(row: Uint8Array, rng: Random): Report {
    const j = rng.below(this.hashes);
    const b = bucket(prefixFingerprint(row, this.prefixLength, this.seed), this.salts[j], this.width);
    return { hash: column("<u4", j), ...this.sample(b, rng) };
  }

  protected abstract sample(bucket: number, rng: Random): Report;

  /** E[Var[z]] for collision fractions with first two moments g1, g2. */
  abstract zVariance(g1: number, g2: number): number;

  rareVariance(): number {
    const m = this.width, k = this.hashes;
    return (m / (m - 1)) ** 2 * (0 * this.zVariance(1.0, 1.0) + 1 * this.zVariance(1 / m, 1 / m ** 2 + (m - 1) / (m ** 2 * k)));
  }
}

export class HCMS extends SketchOracle {
  readonly keep: number;
  readonly c: number;

  constructor(epsilon: number, domain: StringDomain, hashes: number, width: number, seed: bigint, prefixLength: number) {
    if (width & (width - 1)) throw new LDPError(`HCMS width must be a power of 2, got ${width}`);
    super(epsilon, domain, hashes, width, seed, prefixLength);
    const e = Math.exp(this.epsilon);
    this.keep = e / (e + 1);
    this.c = (e + 1) / (e - 1);
  }

  protected sample(b: number, rng: Random): Report {
    const row = rng.below(this.width);
    const flip = rng.uniform() >= this.keep ? 1 : 0;
    return { bit: column("|u1", hadamardBit(row, b) ^ flip), row: column("<u4", row) };
  }

  zVariance(_g1: number, g2: number): number {
    return this.c ** 2 - g2;
  }
}

export class HashedGRR extends SketchOracle {
  readonly p: number;
  readonly q: number;

  constructor(epsilon: number, domain: StringDomain, seed: bigint, prefixLength: number | null = null) {
    const eps = checkFrequencyEpsilon(epsilon);
    const g = Math.floor(Math.exp(eps) + 0.5) + 1;
    const k = Math.min(128, Math.max(16, Math.floor((1 << 16) / Math.max(g, 1))));
    super(eps, domain, k, g, seed, prefixLength);
    const e = Math.exp(this.epsilon);
    this.p = e / (e + this.width - 1);
    this.q = (1 - this.p) / (this.width - 1);
  }

  protected sample(b: number, rng: Random): Report {
    return { y: column("<u4", randomizedResponse(b, this.width, this.p, rng)) };
  }

  zVariance(g1: number, g2: number): number {
    const p = this.p, q = this.q;
    const meanPi = q + (p - q) * g1;
    const meanPi2 = q ** 2 + 2 * q * (p - q) * g1 + (p - q) ** 2 * g2;
    return (meanPi - meanPi2) / (p - q) ** 2;
  }
}

const MAX_EXTENSIONS = 1 << 12;
const MAX_TREE_CANDIDATES = 1 << 21;
const MOD64 = 1n << 64n;

function defaultStep(domain: StringDomain): number {
  const alphabet = domain.symbols + 1;
  return Math.min(domain.maxLength, Math.max(1, Math.floor(Math.log(1024) / Math.log(alphabet) + 1e-9)));
}

/** A prefix tree of sketch oracles: each device reports its prefix of one uniformly drawn level. */
export abstract class PrefixTree implements FreshMechanism<string> {
  abstract readonly name: string;
  readonly epsilon: number;
  readonly domain: StringDomain;
  readonly step: number;
  readonly top: number;
  readonly lengths: number[];
  readonly oracles: SketchOracle[];

  constructor(epsilon: number, domain: StringDomain, seed: bigint, top = 20) {
    this.epsilon = checkFrequencyEpsilon(epsilon);
    this.domain = domain;
    this.step = defaultStep(domain);
    if ((domain.symbols + 1) ** this.step > MAX_EXTENSIONS) throw new LDPError(`step ${this.step} gives too many extensions`);
    if (!Number.isInteger(top) || top < 1) throw new LDPError(`top must be a positive integer, got ${top}`);
    this.top = top;
    const beam = this.defaultBeam(top);
    if (beam < 1 || beam * (domain.symbols + 1) ** this.step > MAX_TREE_CANDIDATES) {
      throw new LDPError(`beam ${beam} is not in [1, ${MAX_TREE_CANDIDATES} / extensions]`);
    }
    this.lengths = [];
    for (let end = this.step; end < domain.maxLength + this.step; end += this.step) {
      this.lengths.push(Math.min(end, domain.maxLength));
    }
    this.oracles = this.lengths.map((length, t) => this.levelOracle(length, (seed * 1_000_003n + BigInt(t)) % MOD64));
  }

  protected abstract levelOracle(prefixLength: number, seed: bigint): SketchOracle;
  protected abstract defaultBeam(top: number): number;

  perturb(value: string, rng: Random): Report {
    const row = this.domain.encode(value);
    const level = rng.below(this.lengths.length);
    return { level: column("|u1", level), ...this.oracles[level].perturbRow(row, rng) };
  }

  worstCaseVariance(): number {
    return this.lengths.length * this.oracles[this.oracles.length - 1].rareVariance();
  }
}

export class HCMSTree extends PrefixTree {
  readonly name = "hcms_tree";

  protected levelOracle(prefixLength: number, seed: bigint): SketchOracle {
    return new HCMS(this.epsilon, this.domain, 64, 1024, seed, prefixLength);
  }

  protected defaultBeam(top: number): number {
    return 2 * top;
  }
}

export class PEM extends PrefixTree {
  readonly name = "pem";

  protected levelOracle(prefixLength: number, seed: bigint): SketchOracle {
    return new HashedGRR(this.epsilon, this.domain, seed, prefixLength);
  }

  protected defaultBeam(top: number): number {
    return top;
  }
}

const PIECES = 256;
const MAX_RECORDS = 1 << 20;
const BEAM_PER_TOP = 256;

/** Apple's sequence fragment puzzle: a fragment record (piece, fragment) and the whole string, each at eps / 2. */
export class SFP implements FreshMechanism<string> {
  readonly name = "sfp";
  readonly epsilon: number;
  readonly domain: StringDomain;
  readonly step: number;
  readonly top: number;
  readonly seed: bigint;
  readonly positions: number[];
  readonly fragments: HashedGRR[];
  readonly word: HashedGRR;
  readonly pieceSeed: bigint;
  readonly pieceSalt: bigint;

  constructor(epsilon: number, domain: StringDomain, seed: bigint, top = 20) {
    this.epsilon = checkFrequencyEpsilon(epsilon);
    this.domain = domain;
    const extensions = domain.symbols + 1;
    const fitting = Math.max(1, Math.floor(Math.log(MAX_RECORDS / PIECES) / Math.log(extensions) + 1e-9));
    this.step = Math.min(2, fitting, domain.maxLength);
    if (PIECES * extensions ** this.step > MAX_RECORDS) throw new LDPError(`step ${this.step} gives too many records`);
    if (!Number.isInteger(top) || top < 1) throw new LDPError(`top must be a positive integer, got ${top}`);
    this.top = top;
    if (BEAM_PER_TOP * top < 1) throw new LDPError("beam");
    this.seed = seed;
    this.positions = [];
    for (let p = 0; p < domain.maxLength; p += this.step) this.positions.push(p);
    const half = this.epsilon / 2;
    const recordDomain = new StringDomain(this.step + 1);
    this.fragments = this.positions.map((_, t) => new HashedGRR(half, recordDomain, this.seedOf(t)));
    this.word = new HashedGRR(half, domain, this.seedOf(this.positions.length));
    this.pieceSeed = this.seedOf(this.positions.length + 1);
    this.pieceSalt = hashSalts(this.pieceSeed, 1)[0];
  }

  private seedOf(index: number): bigint {
    return (this.seed * 1_000_003n + 7919n * BigInt(index + 1)) % MOD64;
  }

  /** r(d) in [0, 256): the public puzzle-piece hash of a whole padded row. */
  piece(row: Uint8Array): number {
    return bucket(prefixFingerprint(row, this.domain.maxLength, this.pieceSeed), this.pieceSalt, PIECES);
  }

  /** The record (piece, then the fragment at fragment index `position`, zeros past the string's end). */
  record(row: Uint8Array, position: number): Uint8Array {
    const out = new Uint8Array(this.step + 1);
    out[0] = this.piece(row);
    for (let i = 0; i < this.step; i++) {
      const at = this.positions[position] + i;
      out[1 + i] = at < row.length ? row[at] : 0;
    }
    return out;
  }

  perturb(value: string, rng: Random): Report {
    const row = this.domain.encode(value);
    const position = rng.below(this.positions.length);
    const fragment = this.fragments[position].perturbRow(this.record(row, position), rng);
    const word = this.word.perturbRow(row, rng);
    return {
      fragment_hash: fragment.hash, fragment_y: fragment.y, position: column("|u1", position), word_hash: word.hash,
      word_y: word.y,
    };
  }
}

export function makeHeavyHitters(name: string, epsilon: number, domain: StringDomain, seed: bigint,
                                 top: number): FreshMechanism<string> {
  if (name === "hcms_tree") return new HCMSTree(epsilon, domain, seed, top);
  if (name === "pem") return new PEM(epsilon, domain, seed, top);
  if (name === "sfp") return new SFP(epsilon, domain, seed, top);
  throw new LDPError(`${JSON.stringify(name)} is not one of hcms_tree, pem, sfp`);
}

/** "auto" of a string attribute: the tree of smaller rare-string variance (`choose_heavy_hitters`): PEM's, in practice. */
/** A string attribute's true value as its mechanism takes it (`ldpstream.device.perturb.true_columns`): the string, if
 * its domain holds it; RecordError naming the attribute otherwise. */
export function trueString(a: { name: string; max_length: number; alphabet: string | null }, value: unknown): string {
  try {
    return new StringDomain(a.max_length, a.alphabet).encode(value as string) && (value as string);
  } catch (exc) {
    throw new RecordError(`attribute '${a.name}': ${(exc as Error).message}`);
  }
}

/** A string attribute's mechanism at eps per report, "auto" resolved (the collector's, `ldpstream.contract.collector`),
 * its hashes seeded by `seed`; LDPError naming the attribute for a name that is not one of `names` (the spec's). */
export function attributeMechanism(a: { name: string; max_length: number; alphabet: string | null; mechanism: string; top: number },
                                   eps: number, seed: bigint, names: readonly string[]): FreshMechanism<string> {
  const name = a.mechanism === "auto" ? chooseHeavyHitters(eps) : a.mechanism;
  if (!names.includes(name)) throw new LDPError(`attribute '${a.name}': '${name}' is not a heavy-hitter mechanism`);
  return makeHeavyHitters(name, eps, new StringDomain(a.max_length, a.alphabet), seed, a.top);
}

export function chooseHeavyHitters(epsilon: number): string {
  const domain = new StringDomain(1);
  const pem = new PEM(epsilon, domain, 0n), hcms = new HCMSTree(epsilon, domain, 0n);
  return hcms.worstCaseVariance() < pem.worstCaseVariance() ? "hcms_tree" : "pem";
}
