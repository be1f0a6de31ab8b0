/**
 * The device's side of the edge's HTTP API (`ldpstream.device.edge_api`, src/ldpstream/edge/openapi.json), over the
 * platform's `fetch`: enrolment, the signed pointer (If-None-Match, 304), the signed spec, a factorization strategy,
 * leaving, and posting reports (`ldpstream.device.http`). One deadline per request (`timeoutMs`, default 30 s): the
 * connection, the headers and the body together, so a server that drips its answer fails at the deadline. No redirect
 * is followed (an `EdgeError` with reason `redirected`: a device never sends its reports or its Authorization to a
 * stranger). Every answer is read up to a size bound, and a JSON answer parsed only if it nests at most
 * `MAX_JSON_DEPTH` deep (`jsonOf`); what fails is an `EdgeError` with the status (0: no answer) and the edge's reason.
 */

import { concatBytes, fromHex, fromUtf8, utf8 } from "./bytes.js";
import { authorization, type Credential } from "./auth.js";
import { EdgeError } from "./errors.js";
import { blockFromHeader } from "./signatures.js";

const MAX_POINTER_BYTES = 4 * 2 ** 10;
const MAX_SPEC_BYTES = 256 * 2 ** 10;
const MAX_STRATEGY_BYTES = 64 * 2 ** 20;
const MAX_ANSWER_BYTES = 64 * 2 ** 10;
/** One request's deadline, by default. */
export const DEFAULT_TIMEOUT_MS = 30_000;
/** How deep a JSON answer may nest. */
export const MAX_JSON_DEPTH = 32;

/** The JSON value of an answer's body if it nests at most MAX_JSON_DEPTH deep; EdgeError(status, "bad_answer") if not. */
export function jsonOf(body: Uint8Array, status: number, what: string): unknown {
  const text = fromUtf8(body);
  let depth = 0, deepest = 0;
  for (const bracket of text.replace(/"(?:[^"\\]|\\.)*"/gs, '""').match(/[[\]{}]/g) ?? []) {
    depth += bracket === "[" || bracket === "{" ? 1 : -1;
    deepest = Math.max(deepest, depth);
  }
  if (deepest > MAX_JSON_DEPTH) throw new EdgeError(status, "bad_answer", `${what} nests too deep`);
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new EdgeError(status, "bad_answer", `${what} is not JSON`);
  }
}

export type Fetch = typeof fetch;

/** A signed document as served: its exact bytes, its signature block and its ETag. */
export interface Signed {
  body: Uint8Array;
  block: Uint8Array | null;
  etag: string | null;
}

export interface Answer {
  status: number;
  headers: Headers;
  body: Uint8Array;
}

async function bounded(response: Response, limit: number): Promise<Uint8Array> {
  if (response.body === null) return new Uint8Array(0);
  const reader = response.body.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > limit) {
      await reader.cancel();
      throw new EdgeError(response.status, "too_large", `the edge's answer exceeds ${limit} bytes`);
    }
    parts.push(value);
  }
  return concatBytes(...parts);
}

/** The reason code and detail of a refusal's JSON body ("" where it gives none). */
export function refusal(answer: Answer): [string, string] {
  try {
    const value = jsonOf(answer.body, answer.status, "a refusal") as { reason?: unknown; error?: unknown } | null;
    return [String(value?.reason ?? "").slice(0, 100), String(value?.error ?? "").slice(0, 200)];
  } catch {
    return ["", ""];
  }
}

/** In a page, what to configure when the edge may have refused its origin: a browser reports a CORS refusal as no
 * answer at all ("Failed to fetch"), like an edge that is down. Empty outside a browser, or for the page's own origin. */
export function corsHint(edgeUrl: string): string {
  const origin = (globalThis as { location?: { origin?: string } }).location?.origin;
  let edgeOrigin = "";
  try {
    edgeOrigin = new URL(edgeUrl).origin;
  } catch {
    return "";
  }
  if (!origin || origin === "null" || origin === edgeOrigin) return "";
  return `; if the edge is running, it may not allow this page's origin (CORS): start it with ` +
    `\`ldp edge --cors-origin ${origin}\``;
}

export class EdgeClient {
  readonly url: string;
  readonly #fetcher: Fetch;

  constructor(baseUrl: string, fetcher: Fetch = globalThis.fetch.bind(globalThis), readonly timeoutMs = DEFAULT_TIMEOUT_MS) {
    this.#fetcher = fetcher;
    this.url = baseUrl.replace(/\/+$/, "");
  }

  /** One request within `timeoutMs` (or `deadlineMs`, when shorter): its status, headers and body (bounded); EdgeError
   * when there is no whole answer in time (reason `timeout`, status 0), a redirect, or a body over `limit`. */
  async request(method: string, path: string, body: Uint8Array | null, headers: Record<string, string>,
                limit: number, deadlineMs = this.timeoutMs): Promise<Answer> {
    const controller = new AbortController();
    const ms = Math.max(0, Math.min(this.timeoutMs, deadlineMs));
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        controller.abort();
        reject(new EdgeError(0, "timeout", `${method} ${path}: no answer within ${ms} ms`));
      }, ms);
    });
    const exchange = async (): Promise<Answer> => {
      const response = await this.#fetcher(this.url + path, {
        method, headers, body: body as BodyInit | null, cache: "no-store", redirect: "manual", signal: controller.signal,
      });
      if (response.type === "opaqueredirect" || (response.status >= 300 && response.status < 400 && response.status !== 304)) {
        void response.body?.cancel().catch(() => undefined);
        const where = (response.headers.get("location") ?? "").slice(0, 200);
        throw new EdgeError(response.status, "redirected", `${method} ${path}: a redirect to '${where}', not followed`);
      }
      return { status: response.status, headers: response.headers, body: await bounded(response, limit) };
    };
    const attempt = exchange();
    attempt.catch(() => undefined); // settled by the race below; a late rejection is not unhandled
    try {
      return await Promise.race([attempt, late]);
    } catch (exc) {
      if (exc instanceof EdgeError) throw exc;
      throw new EdgeError(0, "unreachable",
        `${method} ${path}: no answer from ${this.url} (${String(exc)})${corsHint(this.url)}`);
    } finally {
      clearTimeout(timer);
    }
  }

  async #call(method: string, path: string, body: Uint8Array | null, headers: Record<string, string>,
                     limit: number, notModified = false): Promise<Answer | null> {
    const answer = await this.request(method, path, body, headers, limit);
    if (answer.status === 304 && notModified) return null;
    if (answer.status < 200 || answer.status > 299) {
      const [reason, detail] = refusal(answer);
      throw new EdgeError(answer.status, reason, `${method} ${path}: ${answer.status} ${reason}: ${detail}`);
    }
    return answer;
  }

  /** Exchange an enrolment token for a credential of `collection`. */
  async enroll(token: string, collection: string): Promise<Credential> {
    const body = utf8(JSON.stringify({ token, collection }));
    const answer = (await this.#call("POST", "/v1/enroll", body, { "Content-Type": "application/json" }, MAX_ANSWER_BYTES))!;
    let credential: Credential;
    const value = (jsonOf(answer.body, answer.status, "the enrolment answer") ?? {}) as Record<string, unknown>;
    try {
      if (typeof value.collection !== "string" || typeof value.device !== "string" || typeof value.key !== "string"
          || !/^[A-Za-z0-9._-]{1,64}$/.test(value.device)) throw new Error("fields");
      credential = { collection: value.collection, device: value.device, key: fromHex(value.key) };
    } catch {
      throw new EdgeError(answer.status, "bad_answer", "the enrolment answer is not a credential");
    }
    if (credential.collection !== collection) {
      throw new EdgeError(answer.status, "bad_answer", `the edge enrolled the device in '${credential.collection}'`);
    }
    return credential;
  }

  /** The collection's signed pointer, or null if it is still the one of `etag` (304). */
  async pointer(collection: string, etag: string | null): Promise<Signed | null> {
    const headers: Record<string, string> = etag === null ? {} : { "If-None-Match": etag };
    const answer = await this.#call("GET", `/v1/collections/${encodeURIComponent(collection)}`, null, headers,
                                   MAX_POINTER_BYTES, true);
    return answer === null ? null : signedOf(answer);
  }

  async spec(collection: string, version: number): Promise<Signed> {
    const path = `/v1/collections/${encodeURIComponent(collection)}/specs/${Math.trunc(version)}`;
    return signedOf((await this.#call("GET", path, null, {}, MAX_SPEC_BYTES))!);
  }

  /** A strategy's .npz bytes (unchecked: the caller checks them against the hash). */
  async strategy(contentHash: string): Promise<Uint8Array> {
    return (await this.#call("GET", `/v1/strategies/${encodeURIComponent(contentHash)}`, null, {}, MAX_STRATEGY_BYTES))!.body;
  }

  /** Delete the device's enrolment (its credential stops working). */
  async leave(credential: Credential, nowMs: number): Promise<void> {
    const path = `/v1/collections/${encodeURIComponent(credential.collection)}/devices/${encodeURIComponent(credential.device)}`;
    const auth = authorization(credential.device, credential.key, "DELETE", path, new Uint8Array(0), nowMs);
    await this.#call("DELETE", path, new Uint8Array(0), { Authorization: auth }, MAX_ANSWER_BYTES);
  }
}

function signedOf(answer: Answer): Signed {
  let block: Uint8Array | null;
  try {
    block = blockFromHeader(answer.headers.get("ldp-signature"));
  } catch {
    block = new Uint8Array(0); // not base64: verification refuses it as a malformed signature
  }
  return { body: answer.body, block, etag: answer.headers.get("etag") };
}
