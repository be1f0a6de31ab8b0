/**
 * What the mechanisms loaded on demand share (and the core does not need): integer parameters checked, and numbers
 * printed as Python prints them in their reprs and messages.
 */

import { LDPError } from "../errors.js";

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
