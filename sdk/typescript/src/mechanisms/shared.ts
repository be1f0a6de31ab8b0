/**
 * What the mechanisms loaded on demand (`optional.ts`) share: what they take from the core, re-exported here, and the
 * helpers only they use. They import the core through this module only, and it reaches every lower module they could
 * want (its exports), so the bundler puts what they share with the core in one chunk, rather than a chunk for each
 * combination of modules they share with it (each one more file to fetch, and less for gzip to share). It imports
 * nothing above the mechanisms (README, "Layers"): what a mechanism needs from above is passed in.
 */

import { LDPError } from "../errors.js";

export { concatBytes, fromUtf8, utf8 } from "../bytes.js";
export { LDPError, RecordError, SpecError } from "../errors.js";
export { blake2b, leU64, sha256Hex } from "../hashes.js";
export { bernoulli, type Random } from "../random.js";
export { attributeSecret, GAMMA, keyedUniform, keyedWord, MASK64, mix64, TAG_ATTRIBUTE_SAMPLE, wordUniform } from "../u64.js";
export { checkEpsilon, column, type FreshMechanism, type MemoizedMechanism, type Report } from "./base.js";
export {
  checkCode, checkDomainSize, checkFrequencyEpsilon, FREQUENCY_MAX_EPSILON, hadamardBit, MAX_DOMAIN_SIZE, pureVariance,
  randomizedResponse, randomizedResponseFromUniform,
} from "./frequency.js";
export { DISTRIBUTION_PARAMETERS, LONGITUDINAL_KIND } from "../rules.js";
export { checkNumericEpsilon, checkUnit, duchiBound, NumericMechanism, unit } from "./numeric.js";

/**
 * Python's `format(x, "g")`: 6 significant digits, trailing zeros removed, exponent form below 1e-4 or from 1e6 on
 * (how a mechanism's repr prints its budgets, and so how memo keys name them).
 */
export function formatG(x: number): string {
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const [mantissa, exp] = x.toExponential(5).split("e");
  const e = Number(exp);
  if (e < -4 || e >= 6) {
    const m = mantissa.includes(".") ? mantissa.replace(/0+$/, "").replace(/\.$/, "") : mantissa;
    return `${m}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  }
  const fixed = x.toFixed(Math.max(0, 5 - e));
  return fixed.includes(".") ? fixed.replace(/0+$/, "").replace(/\.$/, "") : fixed;
}

/** An integer in [lo, hi] (not a boolean), or LDPError naming it. */
export function checkInteger(name: string, value: unknown, lo: number, hi: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < lo || value > hi) {
    throw new LDPError(`${name} must be an integer in [${lo}, ${hi}], got ${String(value)}`);
  }
  return value;
}
