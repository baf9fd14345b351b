// The client: create a ride, resume the pending ones, get and list rides.
// The sibling of the Go package (client/client.go), on fetch.

import { memoryJournal, type Journal, type PendingRide } from "./journal.js";
import type { components } from "./openapi.js";
import { exchange, fullJitter, ProblemError, sleep, type Attempt, type RequestOptions, type RetrySettings } from "./retry.js";

/** Where a ride goes from and to, in decimal degrees. */
export type RideParams = components["schemas"]["RideParams"];
/** A ride as the API answers it. */
export type Ride = components["schemas"]["Ride"];
/** Where a ride stands. */
export type RideStatus = components["schemas"]["RideStatus"];
/** A page of rides, newest first. */
export type RideList = components["schemas"]["RideList"];

/** A ride answered to a POST /rides. */
export type CreatedRide = Ride & {
  /** Set when the answer was the stored one of an earlier try with the same key: nothing ran again. */
  replayed: boolean;
  /** The key every try sent. */
  idempotencyKey: string;
};

/** Whether a status never changes again. */
export function isFinal(status: RideStatus): boolean {
  return status === "succeeded" || status === "declined" || status === "failed";
}

/** Defaults of Config's absent fields, in milliseconds where they are times. */
export const DEFAULTS = {
  /** How many tries a request gets, the first included. */
  maxAttempts: 5,
  /** The backoff's ceiling before the first retry; it doubles before each further one. */
  baseDelay: 500,
  /** Caps the backoff, and is the longest Retry-After the client waits for. */
  maxDelay: 30_000,
  /** Bounds one try: longer than the API's own wait for its payment provider. */
  attemptTimeout: 30_000,
  userAgent: "rocketrides-ts",
} as const;

/** Configures a Client. url and token are required; every other field has a default. */
export interface Config {
  /** The API's base URL, such as http://127.0.0.1:5000. */
  url: string;
  /** The API token, sent as a bearer token. */
  token: string;
  /**
   * Where pending rides are kept until their final answer: storageJournal
   * (AsyncStorage) in an app, fileJournal in node. Absent: in memory, which
   * does not survive the app's death.
   */
  journal?: Journal;
  /** Makes a new idempotency key. Absent: crypto.randomUUID, or a UUID from crypto.getRandomValues. */
  newKey?: () => string;
  /** Sends the tries. Absent: the global fetch. */
  fetch?: typeof fetch;
  /** Bounds one try, its answer's body included. A try that runs out is retried. */
  attemptTimeout?: number;
  /** How many tries a request gets, the first included; Infinity leaves it to the request's timeout. */
  maxAttempts?: number;
  /** The backoff's ceiling before the first retry, in milliseconds. */
  baseDelay?: number;
  /** Caps the backoff, and is the longest Retry-After waited for: a longer one ends the request. */
  maxDelay?: number;
  /** Called after every try, with what it got and what the client does next. */
  onAttempt?: (attempt: Attempt) => void;
  /**
   * Told when a ride could not be taken out of the journal after its final
   * answer. The answer is returned all the same; the ride stays pending and
   * its resumption replays the same answer. Absent: console.error.
   */
  onJournalError?: (err: unknown, key: string) => void;
  userAgent?: string;
  /** Draws the backoff's wait from [0, ceiling]. Absent: uniformly (full jitter). */
  jitter?: (ceiling: number) => number;
  /** Waits ms, or rejects when signal aborts. Absent: a timer. */
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
}

/** What resuming one pending ride came to: the ride, or why not. */
export type Resumed = { pending: PendingRide; ride: CreatedRide } | { pending: PendingRide; error: unknown };

/**
 * The oldest a pending ride may be and still be resumed, in milliseconds.
 * The server refuses a key's request for 30 days after its first use (410,
 * final); past that the key is free again and the request would run as a
 * new ride, so a day short of it a pending ride is taken out unsent.
 */
export const MAX_RESUME_AGE = 29 * 24 * 60 * 60 * 1000;

/** resumeRide's error for a ride older than MAX_RESUME_AGE: the rider's rides (listRides) tell what became of it. */
export class TooOldToResumeError extends Error {
  override readonly name = "TooOldToResumeError";
  readonly idempotencyKey: string;
  constructor(ride: PendingRide) {
    super(`the pending ride with key ${ride.idempotencyKey}, recorded ${ride.recorded}, is too old to resume`);
    this.idempotencyKey = ride.idempotencyKey;
  }
}

/** Options of one ride request. */
export interface CreateRideOptions extends RequestOptions {
  /** The key that names the ride. Absent: a new one (Config.newKey). */
  idempotencyKey?: string;
}

const FORM = "application/x-www-form-urlencoded";

/** A client of the API. Rides it sends go through its journal first. */
export class Client {
  readonly #s: RetrySettings;
  readonly #journal: Journal;
  readonly #newKey: () => string;
  readonly #onJournalError: (err: unknown, key: string) => void;

  constructor(config: Config) {
    validate(config);
    this.#s = {
      url: config.url.replace(/\/+$/, ""),
      token: config.token,
      fetch: config.fetch ?? ((input, init) => globalThis.fetch(input, init)),
      attemptTimeout: config.attemptTimeout ?? DEFAULTS.attemptTimeout,
      maxAttempts: config.maxAttempts ?? DEFAULTS.maxAttempts,
      baseDelay: config.baseDelay ?? DEFAULTS.baseDelay,
      maxDelay: config.maxDelay ?? DEFAULTS.maxDelay,
      userAgent: config.userAgent ?? DEFAULTS.userAgent,
      jitter: config.jitter ?? fullJitter,
      sleep: config.sleep ?? sleep,
      onAttempt: config.onAttempt,
    };
    this.#journal = config.journal ?? memoryJournal();
    this.#newKey = config.newKey ?? defaultNewKey();
    this.#onJournalError = config.onJournalError ?? ((err, key) => console.error(`rocketrides: ride ${key} stays in the journal:`, err));
  }

  /**
   * Requests a ride and pays for it. The ride's key and body are in the
   * journal before the first try; the retry protocol runs until a final
   * answer, which takes the ride out of the journal. It resolves to the
   * ride (succeeded, or pending: poll getRide), or rejects with a
   * ProblemError (final: say so to the rider; not final: the ride stays
   * pending in the journal) or a NoAnswerError (the ride stays pending).
   */
  async createRide(params: RideParams, opts: CreateRideOptions = {}): Promise<CreatedRide> {
    const ride: PendingRide = { idempotencyKey: opts.idempotencyKey ?? this.#newKey(), body: form(params), recorded: new Date().toISOString() };
    // Durable before the first byte leaves: a ride the app dies during is
    // found again, with its key, when it starts.
    await this.#journal.record(ride);
    return this.#send(ride, opts);
  }

  /** The rides sent but not finally answered, oldest first: resume each when the app starts. */
  pendingRides(): Promise<PendingRide[]> {
    return this.#journal.pending();
  }

  /**
   * Sends a pending ride again, with its key and the bytes it was first
   * sent with, and settles as createRide does: a final answer takes it out
   * of the journal, anything else leaves it there. A ride recorded longer
   * than MAX_RESUME_AGE ago is taken out unsent (TooOldToResumeError).
   */
  async resumeRide(ride: PendingRide, opts: RequestOptions = {}): Promise<CreatedRide> {
    if (Date.now() - Date.parse(ride.recorded) > MAX_RESUME_AGE) {
      await this.#forget(ride.idempotencyKey);
      throw new TooOldToResumeError(ride);
    }
    return this.#send(ride, opts);
  }

  async #send(ride: PendingRide, opts: RequestOptions): Promise<CreatedRide> {
    const key = ride.idempotencyKey;
    try {
      const ans = await exchange(this.#s, { method: "POST", path: "/rides", key, body: ride.body, contentType: FORM }, opts);
      await this.#forget(key);
      return { ...decode<Ride>(ans.body, "POST /rides"), replayed: ans.replayed, idempotencyKey: key };
    } catch (err) {
      if (err instanceof ProblemError && err.final) await this.#forget(key);
      throw err;
    }
  }

  /** Resumes every pending ride in turn, and tells what each came to. Call it when the app starts. */
  async resumePending(opts: RequestOptions = {}): Promise<Resumed[]> {
    const out: Resumed[] = [];
    for (const pending of await this.pendingRides()) {
      try {
        out.push({ pending, ride: await this.resumeRide(pending, opts) });
      } catch (error) {
        out.push({ pending, error });
      }
    }
    return out;
  }

  /** One of the caller's rides. A GET changes nothing: it is retried like a ride request, without a key. */
  async getRide(id: number, opts: RequestOptions = {}): Promise<Ride> {
    const ans = await exchange(this.#s, { method: "GET", path: `/rides/${id}` }, opts);
    return decode<Ride>(ans.body, "GET /rides/{id}");
  }

  /** A page of the caller's rides, newest first. */
  async listRides(params: { limit?: number; starting_after?: number; status?: RideStatus } = {}, opts: RequestOptions = {}): Promise<RideList> {
    // Written by hand: React Native's URLSearchParams cannot serialise.
    const query = Object.entries(params)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => `${k}=${encodeURIComponent(String(v))}`)
      .join("&");
    const ans = await exchange(this.#s, { method: "GET", path: query ? `/rides?${query}` : "/rides" }, opts);
    return decode<RideList>(ans.body, "GET /rides");
  }

  async #forget(key: string): Promise<void> {
    try {
      await this.#journal.remove(key);
    } catch (err) {
      this.#onJournalError(err, key);
    }
  }
}

/** The ride's form, in a fixed order: the bytes every try of it sends. */
export function form(p: RideParams): string {
  return (["origin_lat", "origin_lon", "target_lat", "target_lon"] as const)
    .map((name) => `${name}=${encodeURIComponent(String(p[name]))}`)
    .join("&");
}

function decode<T>(body: string, what: string): T {
  try {
    return JSON.parse(body) as T;
  } catch (err) {
    throw new Error(`${what}: the answer is not JSON: ${String(err)}`, { cause: err });
  }
}

function validate(c: Config): void {
  if (c === null || typeof c !== "object") throw new TypeError("Config is required (url and token)");
  if (typeof c.url !== "string" || !/^https?:\/\/[^/]+/.test(c.url)) {
    throw new TypeError(`Config.url must be an http or https URL such as http://127.0.0.1:5000, got ${JSON.stringify(c.url)}`);
  }
  if (typeof c.token !== "string" || c.token === "") throw new TypeError("Config.token is required");
  for (const name of ["attemptTimeout", "baseDelay", "maxDelay"] as const) {
    const v = c[name];
    if (v !== undefined && !(Number.isFinite(v) && v > 0)) throw new TypeError(`Config.${name} must be a positive number of milliseconds, got ${v}`);
  }
  const n = c.maxAttempts;
  if (n !== undefined && !(n === Infinity || (Number.isInteger(n) && n >= 1))) {
    throw new TypeError(`Config.maxAttempts must be a whole number of at least 1, or Infinity, got ${n}`);
  }
}

/**
 * The default key maker: a random (version 4) UUID from the platform's
 * crypto. React Native has none without a polyfill: there, pass
 * Config.newKey (expo-crypto's randomUUID, say).
 */
function defaultNewKey(): () => string {
  const crypto = (globalThis as { crypto?: Crypto }).crypto;
  if (typeof crypto?.randomUUID === "function") return () => crypto.randomUUID();
  if (typeof crypto?.getRandomValues === "function") return () => uuidFrom(crypto.getRandomValues(new Uint8Array(16)));
  return () => {
    throw new Error("no crypto.getRandomValues here: pass Config.newKey");
  };
}

/** A version 4 UUID from 16 random bytes (RFC 9562, section 5.4). */
export function uuidFrom(random: Uint8Array): string {
  if (random.length !== 16) throw new RangeError(`uuidFrom needs 16 random bytes, got ${random.length}`);
  const b = Uint8Array.from(random);
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
