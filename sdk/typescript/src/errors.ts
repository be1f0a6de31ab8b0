/**
 * The SDK's errors. Each says why in its message; those that the app branches on carry a `code` (the same codes as
 * the Python SDK and the test vectors under tests/vectors/).
 */

/** Invalid input to a mechanism (a bad epsilon, a value outside its domain) or a mechanism that cannot be built. */
export class LDPError extends Error {
  override name = "LDPError";
}

/** A collection spec that is not valid (the message says where and why). */
export class SpecError extends Error {
  override name = "SpecError";
}

/** A true record the device refuses to perturb (a missing attribute, a value outside its range, an unknown category). */
export class RecordError extends LDPError {
  override name = "RecordError";
}

/** Bytes that are not signed by a pinned key of the right role: `code` is unsigned, malformed_signature,
 * untrusted_key, bad_signature or bad_keys. */
export class SignatureError extends Error {
  override name = "SignatureError";
  constructor(message: string, readonly code: string = "bad_keys") {
    super(message);
  }
}

/** A pointer or spec the device does not believe: `code` names the rule broken (module `trust`). */
export class TrustError extends Error {
  override name = "TrustError";
  constructor(readonly code: string, message: string) {
    super(message);
  }
}

/** A policy object that is not a policy (the message says which field). */
export class PolicyError extends Error {
  override name = "PolicyError";
}

/** A report would exceed a privacy budget: the spec's per window or over the device's lifetime, or a cap of the app's
 * policy. Nothing was charged or sent. */
export class BudgetExceeded extends Error {
  override name = "BudgetExceeded";
}

/** The device will not report to its collection now: `code` says why (a trust or policy rule, `expired`, `left`);
 * nothing was charged or sent. */
export class SpecRefused extends Error {
  override name = "SpecRefused";
  constructor(readonly code: string, message: string) {
    super(message);
  }
}

/** The edge refused or did not answer: `status` (0 for no answer) and its `reason` when it gave one. */
export class EdgeError extends Error {
  override name = "EdgeError";
  constructor(readonly status: number, readonly reason: string, message: string) {
    super(message);
  }
}

/** The device's state cannot be read or written (a damaged file, a full disk or quota); the message says what to do. */
export class StateError extends Error {
  override name = "StateError";
}
