/**
 * @ldpstream/device: the ldpstream device SDK for browsers and Node (module documentation in `device.ts`).
 */

export { Device, type JoinOptions } from "./device.js";
export { DEFAULT_POLICY, EVERY_MECHANISM, judge, makePolicy, type PolicyOptions, type PrivacyPolicy, type Verdict } from "./policy.js";
export { type DeviceStorage, indexedDbStorage, memoryStorage } from "./storage.js";
export {
  BudgetExceeded, EdgeError, LDPError, PolicyError, RecordError, SignatureError, SpecError, SpecRefused, StateError, TrustError,
} from "./errors.js";
export { type PinnedKeysJson, type TrustedKeys, trustedKeysFromJson } from "./signatures.js";
export { type CollectionSpec, parseSpec } from "./spec.js";
export { Collector, type TrueRecord } from "./collector.js";
export { PrivacyLedger } from "./ledger.js";
export { type DeliveryStats, type OutboxOptions, type TransportOptions } from "./outbox.js";
export { CryptoRandom, type Random } from "./random.js";
export { authorization, devicePseudonym, type Credential } from "./auth.js";
// Building blocks, for tools and benchmarks that perturb without a device (tests/typescript, benchmarks/typescript).
export { columnBytes, encodeEnvelope } from "./wire.js";
export { loadMechanisms, needsOf, strategyFromNpz } from "./mechanisms/optional.js";
export { fromBase64, toBase64 } from "./bytes.js";
