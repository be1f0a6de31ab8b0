/**
 * Training on the device (docs/reference/protocol.md section 13), its own entry point "@ldpstream/device/training"
 * (imported on demand, never in the core bundle): the models in plain typed arrays, the job spec, model descriptor
 * and update codecs, the checks of what the edge serves, and the update randomizers. Nothing here imports the
 * device or the collector.
 */

export { checkDims, clipToUnit, decodeSnapshot, type Example, ModelError, Network, parameterCount, type Snapshot } from "./model.js";
export { capRatio, perturbUpdate, privunitgReport, projunitReport, type MechanismSpec, type UpdateReport } from "./gradients.js";
export { checkShape, clippedUpdateVector, computeUpdate, encodeUpdate, JobError, type JobSpec, type ModelDescriptor,
  parseDescriptor, parseJob, snapshotLength } from "./job.js";
export { checkDescriptor, checkJobSpec, checkModelBytes, MODEL_DOMAIN } from "./train.js";
export { type JobJoinOptions, judgeJob, TrainingDevice } from "./device.js";
export { CryptoRandom, type Random } from "../random.js";
export { BudgetExceeded, EdgeError, SpecRefused, StateError } from "../errors.js";
