/**
 * What every mechanism is on the device: a name, the budget one report spends, and `perturb`, which turns one true
 * value into the report columns the aggregators decode (`ldpstream.mechanisms`), with their wire dtypes.
 */

import { LDPError } from "../errors.js";
import type { Random } from "../random.js";

/** The wire dtypes of report columns (numpy's dtype strings). */
export type Dtype = "<f8" | "<i8" | "<u4" | "|u1" | "|i1";

/** One column of one device's report: its dtype and its `width` values (one for most columns). */
export interface ReportColumn {
  dtype: Dtype;
  values: number[];
}

/** One attribute's report from one device, by column name. */
export type Report = Record<string, ReportColumn>;

export interface Mechanism {
  /** The registry name (`ldpstream.mechanisms.registry`). */
  readonly name: string;
  /** What one report guarantees (eps-LDP). */
  readonly epsilon: number;
}

/** A mechanism that perturbs with fresh noise only. */
export interface FreshMechanism<T> extends Mechanism {
  perturb(value: T, rng: Random): Report;
}

/** A memoized (longitudinal) mechanism: its permanent responses are a function of the device's attribute secret. */
export interface MemoizedMechanism<T> extends Mechanism {
  readonly epsilonLifetime: number;
  readonly kind: "frequency" | "numeric";
  perturb(value: T, rng: Random, secret: bigint): Report;
  /** The key of the memo a report of `value` reads (the value's code, or 1BitMean's rounded value). */
  memoKey(value: T, secret: bigint): number;
  /** Python's repr of the mechanism: it names the memos in the ledger (`ldpstream.device.perturb.report_memos`). */
  repr(): string;
  /** Worst-case one-report variance (what `auto` compares). */
  worstCaseVariance(): number;
}

export function checkEpsilon(epsilon: number): number {
  if (typeof epsilon !== "number" || !Number.isFinite(epsilon) || epsilon <= 0) {
    throw new LDPError(`epsilon must be finite and > 0, got ${String(epsilon)}`);
  }
  return epsilon;
}

export function column(dtype: Dtype, ...values: number[]): ReportColumn {
  return { dtype, values };
}

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
