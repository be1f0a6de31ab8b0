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
  /** What fixes its memos, in the order their name lists them (docs/reference/protocol.md, "Memo naming"). */
  memoParameters(): [string, number][];
  /** Python's repr of the mechanism: it named the memos in the ledger before memo naming m1 (their legacy names). */
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
