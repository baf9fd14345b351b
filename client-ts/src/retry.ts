// The retry protocol (docs/openapi.yaml, "The retry protocol"): one
// exchange tried until its answer is final, its tries run out or its
// deadline would pass. It is the client's one retry loop, a port of the Go
// package's (client/retry.go).

import type { components } from "./openapi.js";

/** The server's word on whether a failed try may be retried with the same key. */
export const SHOULD_RETRY_HEADER = "Rocket-Rides-Should-Retry";

/** A problem code, as docs/openapi.yaml lists them. */
export type ProblemCode = components["schemas"]["ProblemCode"];
/** One rejected parameter of a 422 invalid_params. */
export type InvalidParam = components["schemas"]["InvalidParam"];
type ProblemDocument = components["schemas"]["Problem"];

/** One request as every one of its tries sends it: the same method, path, key and bytes. */
export interface Exchange {
  method: "GET" | "POST";
  path: string;
  /** The Idempotency-Key; absent for a GET. */
  key?: string;
  /** The body, ASCII (a form), so its characters are its bytes; absent for a GET. */
  body?: string;
  contentType?: string;
}

/** What one try got. */
export interface Answer {
  status: number;
  headers: Headers;
  body: string;
  replayed: boolean;
}

/** One try of a request, as Config.onAttempt sees it. */
export interface Attempt {
  method: string;
  path: string;
  idempotencyKey?: string;
  /** Counts the tries of the request, from 1. */
  n: number;
  /** The answer's HTTP status; absent when none arrived (see error). */
  status?: number;
  code?: string;
  rideId?: number;
  replayed: boolean;
  /** The answer's Retry-After, in milliseconds; 0 when it had none. */
  retryAfter: number;
  /** Why no answer arrived: a network error, a timeout. */
  error?: unknown;
  /** How long the try took, in milliseconds. */
  latency: number;
  /** Set when the answer is final: a 2xx, or an error no retry with the same key can change. */
  final: boolean;
  /** Whether another try follows, after wait milliseconds. Neither final nor retry: the client gave up. */
  retry: boolean;
  wait: number;
}

/** The retry loop's settings, defaulted (see Config in client.ts). */
export interface RetrySettings {
  url: string;
  token: string;
  fetch: typeof fetch;
  attemptTimeout: number;
  maxAttempts: number;
  baseDelay: number;
  maxDelay: number;
  userAgent: string;
  jitter: (ceiling: number) => number;
  sleep: (ms: number, signal: AbortSignal) => Promise<void>;
  onAttempt?: (attempt: Attempt) => void;
}

/** Bounds on one request: the caller's signal and an overall timeout. */
export interface RequestOptions {
  /** Ends the request, the try under way included. */
  signal?: AbortSignal;
  /**
   * Bounds the whole request, in milliseconds: no wait is started that
   * would outlast it, and the client gives up instead, with the last answer.
   */
  timeout?: number;
}

/**
 * A problem answer (RFC 9457, application/problem+json). `final` says
 * whether a retry with the same key could still change it.
 */
export class ProblemError extends Error {
  override readonly name = "ProblemError";
  /** The HTTP status. */
  readonly status: number;
  /**
   * The stable code; branch on it. Empty when the answer was no problem
   * document (a proxy's page); a newer server may send a code not listed yet.
   */
  readonly code: ProblemCode | (string & {});
  readonly type: string;
  readonly title: string;
  readonly detail: string;
  readonly invalidParams: InvalidParam[];
  /** The ride the request created before it failed, when it did: follow it with getRide. */
  readonly rideId?: number;
  /**
   * Set when no retry with the same key can change the answer. Unset: the
   * client gave up on an answer that may still change (its tries or its
   * time ran out); a ride it names is pending.
   */
  readonly final: boolean;
  /** The answer's Retry-After, in milliseconds; 0 when it had none. */
  readonly retryAfter: number;
  readonly replayed: boolean;
  /** The server's id of the request, for support. */
  readonly requestId: string;
  /** The request's key; absent for a GET. */
  readonly idempotencyKey?: string;

  constructor(ex: Exchange, ans: Answer) {
    let doc: Partial<ProblemDocument> = {};
    try {
      const parsed: unknown = JSON.parse(ans.body);
      if (parsed !== null && typeof parsed === "object") doc = parsed as Partial<ProblemDocument>;
    } catch {
      // Not a problem document: a proxy's error page.
    }
    const code: string = typeof doc.code === "string" ? doc.code : "";
    const isProblem = code !== "";
    const rideId = typeof doc.ride_id === "number" ? doc.ride_id : undefined;
    super(`${ans.status}${code ? " " + code : ""}${doc.detail ? ": " + doc.detail : ""}${rideId ? ` (ride ${rideId})` : ""}`);
    this.status = ans.status;
    this.code = code;
    this.type = typeof doc.type === "string" ? doc.type : "";
    this.title = typeof doc.title === "string" ? doc.title : "";
    this.detail = typeof doc.detail === "string" ? doc.detail : "";
    this.invalidParams = Array.isArray(doc.invalid_params) ? doc.invalid_params : [];
    this.rideId = rideId;
    this.retryAfter = parseRetryAfter(ans.headers.get("Retry-After"), Date.now());
    this.replayed = ans.replayed;
    this.requestId = ans.headers.get("Request-Id") ?? "";
    this.idempotencyKey = ex.key;
    this.final = !shouldRetry(ans.status, ans.headers.get(SHOULD_RETRY_HEADER), ans.replayed, isProblem);
  }
}

/**
 * No try was answered: the request may have run or not. idempotencyKey is
 * the key every try sent, the one a later retry of the same ride must send
 * again; cause is the last try's error.
 */
export class NoAnswerError extends Error {
  override readonly name = "NoAnswerError";
  readonly idempotencyKey?: string;

  constructor(ex: Exchange, cause: unknown) {
    super(`${ex.method} ${ex.path}${ex.key ? ` with key ${ex.key}` : ""}: no answer: ${String(cause)}`, { cause });
    this.idempotencyKey = ex.key;
  }
}

/**
 * The retry protocol's rule for an error answer: the server's hint when it
 * sent one, else the status.
 */
export function shouldRetry(status: number, hint: string | null, replayed: boolean, isProblem: boolean): boolean {
  switch ((hint ?? "").trim().toLowerCase()) {
    case "true":
      return true;
    case "false":
      return false;
  }
  // A stored answer is replayed byte for byte on every retry.
  if (replayed) return false;
  if ([408, 409, 429, 500, 503].includes(status)) return true;
  // A 502 or 504 that is no problem document is a proxy's, not the API's
  // answer: as good as no answer at all.
  return !isProblem && (status === 502 || status === 504);
}

/**
 * Reads a Retry-After header, delay-seconds or an HTTP-date (RFC 9110,
 * section 10.2.3), in milliseconds; anything else is no hint.
 */
export function parseRetryAfter(value: string | null, now: number): number {
  const v = (value ?? "").trim();
  if (v === "") return 0;
  if (/^[+-]?\d+$/.test(v)) return Math.max(Number(v) * 1000, 0);
  const at = Date.parse(v);
  return Number.isNaN(at) ? 0 : Math.max(at - now, 0);
}

/** Draws a wait uniformly from [0, ceiling]: full jitter. */
export function fullJitter(ceiling: number): number {
  return Math.random() * ceiling;
}

/** Waits ms, or until signal aborts (then rejects with its reason). */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Sends ex until an answer is final, the tries run out, a wait would
 * outlast the request's timeout, or its signal aborts. It resolves to a
 * 2xx answer, and rejects with a ProblemError for an error answer or a
 * NoAnswerError when the last try got none.
 */
export async function exchange(s: RetrySettings, ex: Exchange, opts: RequestOptions = {}): Promise<Answer> {
  // The request's own signal: the caller's, and the timeout's.
  const request = new AbortController();
  const deadline = opts.timeout === undefined ? Infinity : Date.now() + opts.timeout;
  const timer = deadline === Infinity ? undefined : setTimeout(() => request.abort(new Error("request timed out")), opts.timeout);
  const onAbort = () => request.abort(opts.signal?.reason);
  if (opts.signal?.aborted) onAbort();
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    for (let n = 1; ; n++) {
      const start = Date.now();
      let ans: Answer | undefined;
      let failure: ProblemError | NoAnswerError;
      const a: Attempt = {
        method: ex.method, path: ex.path, idempotencyKey: ex.key, n,
        replayed: false, retryAfter: 0, latency: 0, final: false, retry: false, wait: 0,
      };
      let retry = false;
      try {
        ans = await tryOnce(s, ex, request.signal);
      } catch (err) {
        // No answer: the request may or may not have reached the API, and
        // only a retry with the same key can tell. The request's own end
        // (the caller's signal, its timeout) is no such failure.
        a.error = err;
        retry = !request.signal.aborted;
      }
      a.latency = Date.now() - start;
      if (ans === undefined) {
        failure = new NoAnswerError(ex, a.error);
      } else if (ans.status >= 200 && ans.status < 300) {
        a.status = ans.status;
        a.replayed = ans.replayed;
        a.final = true;
        s.onAttempt?.(a);
        return ans;
      } else {
        const prob = new ProblemError(ex, ans);
        failure = prob;
        retry = !prob.final;
        Object.assign(a, {
          status: prob.status, code: prob.code || undefined, rideId: prob.rideId,
          replayed: prob.replayed, retryAfter: prob.retryAfter, final: prob.final,
        });
      }
      if (retry && n < s.maxAttempts) {
        const wait = waitBefore(s, n, a.retryAfter, deadline);
        if (wait !== undefined) {
          a.retry = true;
          a.wait = wait;
        }
      }
      s.onAttempt?.(a);
      if (!a.retry) throw failure;
      try {
        await s.sleep(a.wait, request.signal);
      } catch {
        throw failure;
      }
    }
  } finally {
    clearTimeout(timer);
    opts.signal?.removeEventListener("abort", onAbort);
  }
}

/**
 * The wait before retry n, given the last answer's Retry-After, or
 * undefined for no retry at all: not when the server asks for a longer
 * wait than maxDelay, nor when the wait would outlast the deadline.
 */
export function waitBefore(s: Pick<RetrySettings, "baseDelay" | "maxDelay" | "jitter">, n: number, retryAfter: number, deadline: number): number | undefined {
  if (retryAfter > s.maxDelay) return undefined;
  const ceiling = Math.min(s.maxDelay, s.baseDelay * 2 ** (n - 1));
  // The server knows better than any backoff when it will be ready.
  const wait = Math.max(s.jitter(ceiling), retryAfter);
  if (deadline - Date.now() <= wait) return undefined;
  return wait;
}

/** Sends ex once, bounded by attemptTimeout, and reads its answer whole. */
async function tryOnce(s: RetrySettings, ex: Exchange, requestSignal: AbortSignal): Promise<Answer> {
  const attempt = new AbortController();
  const onAbort = () => attempt.abort(requestSignal.reason);
  requestSignal.addEventListener("abort", onAbort, { once: true });
  const timer = setTimeout(() => attempt.abort(new Error(`no answer within ${s.attemptTimeout} ms`)), s.attemptTimeout);
  try {
    const headers: Record<string, string> = {
      Authorization: `Bearer ${s.token}`,
      Accept: "application/json",
      "User-Agent": s.userAgent,
    };
    if (ex.key !== undefined) headers["Idempotency-Key"] = ex.key;
    if (ex.contentType !== undefined) headers["Content-Type"] = ex.contentType;
    const resp = await s.fetch(s.url + ex.path, { method: ex.method, headers, body: ex.body, signal: attempt.signal });
    // An answer lost on the way is as good as none: this throws, and a
    // retry with the same key gets it again.
    const body = await resp.text();
    return { status: resp.status, headers: resp.headers, body, replayed: resp.headers.get("Idempotent-Replayed") === "true" };
  } finally {
    clearTimeout(timer);
    requestSignal.removeEventListener("abort", onAbort);
  }
}
