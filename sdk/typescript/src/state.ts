/**
 * What a device keeps about the collections it joined (`ldpstream.device.state`), as the "device" value of its
 * storage, in the Python SDK's `device.json` format: per collection its credential, the newest pointer it accepted
 * and the signed bytes of the spec it uses (kept as they came, so they are verified again on every start), and the
 * app-readable verdict. A value that does not read back is a `StateError`: the device refuses to guess.
 */

import type { Credential } from "./auth.js";
import { fromBase64, fromHex, toBase64, toHex } from "./bytes.js";
import { StateError } from "./errors.js";
import type { DeviceStorage } from "./storage.js";
import type { Seen } from "./trust.js";

const FORMAT = 1;

export interface VerdictJson {
  accepted: boolean;
  code: string;
  reason: string;
}

export interface CollectionState {
  credential: Credential | null;
  seen: Seen;
  pointer: Uint8Array | null;
  pointerBlock: Uint8Array | null;
  pointerEtag: string | null;
  spec: Uint8Array | null;
  specBlock: Uint8Array | null;
  verdict: VerdictJson | null;
}

function b64(data: Uint8Array | null): string | null {
  return data === null ? null : toBase64(data);
}

function unb64(text: unknown): Uint8Array | null {
  return text === null ? null : fromBase64(text as string);
}

function fresh(): CollectionState {
  return { credential: null, seen: { version: 0, sequence: -1 }, pointer: null, pointerBlock: null, pointerEtag: null,
           spec: null, specBlock: null, verdict: null };
}

export class DeviceState {
  readonly #storage: DeviceStorage;

  private constructor(storage: DeviceStorage, readonly collections: Map<string, CollectionState>) {
    this.#storage = storage;
  }

  static async open(storage: DeviceStorage): Promise<DeviceState> {
    let text: string | undefined | null;
    try {
      text = await storage.get("device");
    } catch (exc) {
      throw new StateError(`cannot read the device state: ${String(exc)}`);
    }
    if (text === undefined || text === null) return new DeviceState(storage, new Map());
    try {
      const data = JSON.parse(text) as { format?: unknown; collections?: Record<string, Record<string, unknown>> };
      if (data.format !== FORMAT || typeof data.collections !== "object" || data.collections === null) throw new Error(`format ${String(data.format)}`);
      const collections = new Map<string, CollectionState>();
      for (const [name, d] of Object.entries(data.collections)) {
        const c = d.credential as Record<string, unknown> | null;
        const [version, sequence] = d.seen as [unknown, unknown];
        if (!Number.isSafeInteger(version) || !Number.isSafeInteger(sequence)) throw new Error("seen");
        if (d.verdict !== null && (typeof d.verdict !== "object" || Array.isArray(d.verdict))) throw new Error("verdict");
        if (d.pointer_etag !== null && typeof d.pointer_etag !== "string") throw new Error("etag");
        if (c !== null && (typeof c.collection !== "string" || typeof c.device !== "string" || typeof c.key !== "string")) {
          throw new Error("credential");
        }
        collections.set(name, {
          credential: c === null ? null : { collection: c.collection as string, device: c.device as string, key: fromHex(c.key as string) },
          seen: { version: version as number, sequence: sequence as number }, pointer: unb64(d.pointer),
          pointerBlock: unb64(d.pointer_block), pointerEtag: d.pointer_etag as string | null, spec: unb64(d.spec),
          specBlock: unb64(d.spec_block), verdict: d.verdict as VerdictJson | null,
        });
      }
      return new DeviceState(storage, collections);
    } catch (exc) {
      throw new StateError(`the device state is damaged (${String(exc)}): repair or reset it`);
    }
  }

  of(collection: string): CollectionState {
    let state = this.collections.get(collection);
    if (state === undefined) {
      state = fresh();
      this.collections.set(collection, state);
    }
    return state;
  }

  /** Write the state durably; StateError if it cannot be written (a full disk or quota). */
  async save(): Promise<void> {
    const collections: Record<string, unknown> = {};
    for (const name of [...this.collections.keys()].sort()) {
      const s = this.collections.get(name) as CollectionState;
      collections[name] = {
        credential: s.credential === null ? null : { collection: s.credential.collection, device: s.credential.device, key: toHex(s.credential.key) },
        seen: [s.seen.version, s.seen.sequence], pointer: b64(s.pointer), pointer_block: b64(s.pointerBlock),
        pointer_etag: s.pointerEtag, spec: b64(s.spec), spec_block: b64(s.specBlock), verdict: s.verdict,
      };
    }
    try {
      await this.#storage.set("device", JSON.stringify({ format: FORMAT, collections }));
    } catch (exc) {
      throw new StateError(`cannot write the device state: ${String(exc)}`);
    }
  }
}
