/**
 * What a training device believes (docs/reference/protocol.md 9.1-9.3), checked in the protocol's order and refused
 * at the first rule broken with `TrustError.code`:
 *
 * job spec: its spec-key signature over `spec_message("job/JOB@VERSION", bytes)` (unsigned, malformed_signature,
 * untrusted_key, bad_signature), parsing (malformed_job), wrong_job (not the job or version asked for), rollback
 * (below the highest spec version seen);
 * model descriptor: its online-key (pointer role) signature over MODEL_DOMAIN + bytes, malformed_model, wrong_job,
 * wrong_shape (architecture, dims, parameters or size not the spec's: before anything is allocated or fetched),
 * rollback (a version below the highest accepted), issued_in_future, expired (a frozen version), done;
 * version bytes: too_large (more than the descriptor's size), hash_mismatch, malformed_model (not that version and
 * shape).
 * Signature checks run on the raw bytes before anything is parsed. Pure but for the signature check (WebCrypto).
 */

import { concatBytes, utf8 } from "../bytes.js";
import { TrustError } from "../errors.js";
import { sha256Hex } from "../hashes.js";
import { MAX_SKEW_MS } from "../pointer.js";
import { specMessage, type TrustedKeys, verifyBlock } from "../signatures.js";
import { signed } from "../trust.js";
import { checkShape, JOB_PREFIX, JobError, type JobSpec, type ModelDescriptor, parseDescriptor, parseJob } from "./job.js";
import { decodeSnapshot, ModelError } from "./model.js";

export const MODEL_DOMAIN = utf8("ldpstream model version signature v1\x00");

function parsed<T>(parse: () => T): T {
  try {
    return parse();
  } catch (exc) {
    if (exc instanceof JobError) throw new TrustError(exc.code, exc.message);
    throw exc;
  }
}

/** The job spec of `job` at `version` from these outside bytes and signature block, or TrustError (module doc);
 * `seenVersion` is the highest spec version the device accepted for this job (0: none). */
export async function checkJobSpec(data: Uint8Array, block: Uint8Array | null, keys: TrustedKeys, job: string,
                                   version: number, seenVersion: number): Promise<JobSpec> {
  const key = utf8(`${JOB_PREFIX}${job}@${version}`);
  await signed(() => verifyBlock(keys.spec, block, specMessage(key, data), `job spec of '${job}'`));
  const spec = parsed(() => parseJob(data));
  if (spec.job_id !== job || spec.version !== version) {
    throw new TrustError("wrong_job", `a spec of '${spec.job_id}' version ${spec.version}, not '${job}' version ${version}`);
  }
  if (spec.version < seenVersion) throw new TrustError("rollback", `job spec version ${spec.version} is older than ${seenVersion} accepted`);
  return spec;
}

/** The model descriptor in these outside bytes, checked against the spec, the highest model version accepted for
 * this job (`seenVersion`, -1: none) and the clock; TrustError otherwise (module doc). */
export async function checkDescriptor(data: Uint8Array, block: Uint8Array | null, keys: TrustedKeys, spec: JobSpec,
                                      seenVersion: number, nowMs: number): Promise<ModelDescriptor> {
  await signed(() => verifyBlock(keys.pointer, block, concatBytes(MODEL_DOMAIN, data), `model of '${spec.job_id}'`));
  const d = parsed(() => parseDescriptor(data));
  if (d.job !== spec.job_id || d.job_version !== spec.version) {
    throw new TrustError("wrong_job", `a model of '${d.job}' version ${d.job_version}, not '${spec.job_id}' version ${spec.version}`);
  }
  parsed(() => checkShape(d, spec));
  if (d.version < seenVersion) throw new TrustError("rollback", `model version ${d.version} is older than ${seenVersion} accepted`);
  if (d.issued_ms > nowMs + MAX_SKEW_MS) throw new TrustError("issued_in_future", `the model is issued after the clock (${nowMs} ms)`);
  if (d.expires_ms < nowMs) throw new TrustError("expired", `model version ${d.version} expired at ${d.expires_ms} ms (now ${nowMs} ms)`);
  if (d.done) throw new TrustError("done", `the job '${spec.job_id}' ended at model version ${d.version}`);
  return d;
}

/** The parameters of the version a checked descriptor names, from its outside bytes; TrustError otherwise. */
export function checkModelBytes(data: Uint8Array, d: ModelDescriptor, spec: JobSpec): Float64Array {
  if (data.length > d.size) throw new TrustError("too_large", `model bytes of ${data.length} bytes, the descriptor says ${d.size}`);
  if (sha256Hex(data) !== d.sha256) throw new TrustError("hash_mismatch", "the model bytes are not the ones the descriptor names");
  try {
    const snap = decodeSnapshot(data, { name: spec.model.architecture, dims: spec.model.dims });
    if (snap.version !== BigInt(d.version)) throw new ModelError(`the bytes are version ${snap.version}, not ${d.version}`);
    return snap.params;
  } catch (exc) {
    if (exc instanceof ModelError) throw new TrustError("malformed_model", exc.message);
    throw exc;
  }
}
