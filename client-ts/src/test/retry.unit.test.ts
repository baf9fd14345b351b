// The retry protocol, against scripted servers for the answers the real
// api gives only under faults. Mirrors client/client_test.go.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { webcrypto } from "node:crypto";
import { MAX_RESUME_AGE, memoryJournal, NoAnswerError, TooOldToResumeError, uuidFrom, parseRetryAfter, ProblemError, shouldRetry } from "../index.js";
import { waitBefore } from "../retry.js";
import { cut, page, params, problem, ride, script, testClient } from "./script.js";

describe("createRide", () => {
  it("retries with the same key and body, honouring Retry-After", async () => {
    const s = await script([
      problem(503, "payment_unavailable", "Retry-After", "2"),
      problem(409, "request_in_progress", "Retry-After", "1"),
      cut,
      ride(true),
    ]);
    try {
      const { client, waits, attempts } = testClient(s.url);
      const got = await client.createRide(params);
      assert.equal(got.id, 42);
      assert.equal(got.status, "succeeded");
      assert.equal(got.replayed, true);
      assert.equal(s.tries.length, 4);
      for (const t of s.tries) assert.deepEqual(t, s.tries[0]);
      assert.equal(got.idempotencyKey, s.tries[0]!.key);
      assert.equal(s.tries[0]!.body, "origin_lat=37.7749&origin_lon=-122.4194&target_lat=37.8044&target_lon=-122.2712");
      assert.equal(s.tries[0]!.contentType, "application/x-www-form-urlencoded");
      // Retry-After wins over a shorter backoff ceiling (0.5 s, 1 s); the
      // third wait is the backoff's 2 s ceiling.
      assert.deepEqual(waits, [2000, 1000, 2000]);
      assert.deepEqual(attempts.map((a) => [a.n, a.status, a.retry, a.final]), [
        [1, 503, true, false], [2, 409, true, false], [3, undefined, true, false], [4, 201, false, true],
      ]);
    } finally {
      await s.close();
    }
  });

  for (const [name, answer, code] of [
    ["a stored 402", problem(402, "card_declined", "Idempotent-Replayed", "true"), "card_declined"],
    ["a 422", problem(422, "invalid_params"), "invalid_params"],
    ["a 500 the server says is final", problem(500, "internal_error", "Rocket-Rides-Should-Retry", "false"), "internal_error"],
    ["a 502 problem", problem(502, "payment_rejected"), "payment_rejected"],
    ["a 410", problem(410, "idempotency_key_expired"), "idempotency_key_expired"],
  ] as const) {
    it(`stops on ${name} and forgets the ride`, async () => {
      const s = await script([answer, ride()]);
      try {
        const journal = memoryJournal();
        const { client, waits } = testClient(s.url, { journal });
        const err = await client.createRide(params).then(() => assert.fail("resolved"), (e: unknown) => e);
        assert.ok(err instanceof ProblemError, String(err));
        assert.equal(err.code, code);
        assert.equal(err.final, true);
        assert.equal(err.rideId, 42);
        assert.equal(err.idempotencyKey, s.tries[0]!.key);
        assert.equal(s.tries.length, 1);
        assert.deepEqual(waits, []);
        assert.deepEqual(await journal.pending(), []);
      } finally {
        await s.close();
      }
    });
  }

  it("retries a proxy's 502 page, and a 500 the server says to retry", async () => {
    const s = await script([page(502), page(504), problem(500, "internal_error", "Rocket-Rides-Should-Retry", "true"), ride()]);
    try {
      const { client } = testClient(s.url);
      assert.equal((await client.createRide(params)).status, "succeeded");
      assert.equal(s.tries.length, 4);
    } finally {
      await s.close();
    }
  });

  it("gives up within its tries and keeps the ride pending", async () => {
    const s = await script([problem(503, "payment_unavailable", "Retry-After", "1")]);
    try {
      const journal = memoryJournal();
      const { client, waits } = testClient(s.url, { journal, maxAttempts: 3 });
      const err = await client.createRide(params).then(() => assert.fail("resolved"), (e: unknown) => e);
      assert.ok(err instanceof ProblemError);
      assert.equal(err.final, false);
      assert.equal(err.rideId, 42);
      assert.equal(s.tries.length, 3);
      assert.deepEqual(waits, [1000, 1000]);
      const pending = await journal.pending();
      assert.deepEqual(pending.map((p) => [p.idempotencyKey, p.body]), [[s.tries[0]!.key, s.tries[0]!.body]]);
    } finally {
      await s.close();
    }
  });

  it("does not wait for a Retry-After longer than maxDelay", async () => {
    const s = await script([problem(503, "payment_unavailable", "Retry-After", "60"), ride()]);
    try {
      const { client, waits } = testClient(s.url);
      const err = await client.createRide(params).then(() => assert.fail("resolved"), (e: unknown) => e);
      assert.ok(err instanceof ProblemError && !err.final);
      assert.equal(s.tries.length, 1);
      assert.deepEqual(waits, []);
    } finally {
      await s.close();
    }
  });

  it("does not start a wait that would outlast its timeout", async () => {
    const s = await script([problem(503, "payment_unavailable", "Retry-After", "2"), ride()]);
    try {
      const { client } = testClient(s.url, { sleep: undefined });
      const err = await client.createRide(params, { timeout: 1500 }).then(() => assert.fail("resolved"), (e: unknown) => e);
      assert.ok(err instanceof ProblemError && err.code === "payment_unavailable");
      assert.equal(s.tries.length, 1);
    } finally {
      await s.close();
    }
  });

  it("gives a NoAnswerError with the key when nothing answers, and keeps the ride", async () => {
    const s = await script([cut]);
    try {
      const journal = memoryJournal();
      const { client } = testClient(s.url, { journal, maxAttempts: 2 });
      const err = await client.createRide(params).then(() => assert.fail("resolved"), (e: unknown) => e);
      assert.ok(err instanceof NoAnswerError, String(err));
      assert.equal(err.idempotencyKey, s.tries[0]!.key);
      assert.equal(s.tries.length, 2);
      assert.deepEqual((await journal.pending()).map((p) => p.idempotencyKey), [err.idempotencyKey]);
    } finally {
      await s.close();
    }
  });

  it("retries a try that runs out of attemptTimeout", async () => {
    const s = await script([() => undefined /* never answers */, ride()]);
    try {
      const { client, attempts } = testClient(s.url, { attemptTimeout: 200 });
      assert.equal((await client.createRide(params)).status, "succeeded");
      assert.equal(s.tries.length, 2);
      assert.match(String(attempts[0]!.error), /no answer within 200 ms/);
    } finally {
      await s.close();
    }
  });

  it("ends at once when the caller aborts, keeping the ride", async () => {
    const s = await script([() => undefined]);
    try {
      const journal = memoryJournal();
      const { client } = testClient(s.url, { journal });
      const abort = new AbortController();
      const done = client.createRide(params, { signal: abort.signal }).then(() => assert.fail("resolved"), (e: unknown) => e);
      while (s.tries.length === 0) await new Promise((r) => setTimeout(r, 10));
      abort.abort(new Error("the rider left"));
      const err = await done;
      assert.ok(err instanceof NoAnswerError);
      assert.equal(s.tries.length, 1);
      assert.equal((await journal.pending()).length, 1);
    } finally {
      await s.close();
    }
  });

  it("uses the key it is given, and the key maker it is given", async () => {
    const s = await script([ride()]);
    try {
      const { client } = testClient(s.url, { newKey: () => "made-by-the-app-0123456789" });
      await client.createRide(params);
      await client.createRide(params, { idempotencyKey: "given-by-the-caller-0123456789" });
      assert.deepEqual(s.tries.map((t) => t.key), ["made-by-the-app-0123456789", "given-by-the-caller-0123456789"]);
    } finally {
      await s.close();
    }
  });

  it("makes version 4 UUIDs by default, or from any source of random bytes", async () => {
    const s = await script([ride()]);
    try {
      const v4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
      const { client } = testClient(s.url);
      await client.createRide(params);
      await client.createRide(params);
      assert.match(s.tries[0]!.key!, v4);
      assert.notEqual(s.tries[0]!.key, s.tries[1]!.key);
      assert.match(uuidFrom(webcrypto.getRandomValues(new Uint8Array(16))), v4);
      assert.equal(uuidFrom(new Uint8Array(16).fill(0xff)), "ffffffff-ffff-4fff-bfff-ffffffffffff");
      assert.equal(uuidFrom(new Uint8Array(16)), "00000000-0000-4000-8000-000000000000");
    } finally {
      await s.close();
    }
  });

  it("sends no try when the journal cannot record the ride", async () => {
    const s = await script([ride()]);
    try {
      const journal = { ...memoryJournal(), record: () => Promise.reject(new Error("disk full")) };
      const { client } = testClient(s.url, { journal });
      await assert.rejects(client.createRide(params), /disk full/);
      assert.equal(s.tries.length, 0);
    } finally {
      await s.close();
    }
  });
});

describe("resuming", () => {
  it("resumes every pending ride with its key and bytes, then forgets it", async () => {
    const s = await script([problem(503, "payment_unavailable"), ride(true)]);
    try {
      const journal = memoryJournal();
      const rides = [
        { idempotencyKey: "first-ride-0123456789abcdef", body: "origin_lat=1&origin_lon=2&target_lat=3&target_lon=4", recorded: new Date().toISOString() },
        { idempotencyKey: "second-ride-0123456789abcdef", body: "target_lat=3&origin_lat=1.50&origin_lon=2&target_lon=4", recorded: new Date().toISOString() },
      ];
      for (const r of rides) await journal.record(r);
      const { client } = testClient(s.url, { journal });
      const resumed = await client.resumePending();
      assert.deepEqual(resumed.map((r) => [r.pending.idempotencyKey, "ride" in r && r.ride.replayed]), rides.map((r) => [r.idempotencyKey, true]));
      // The bytes as recorded, not the parameters encoded anew.
      assert.deepEqual(s.tries.map((t) => [t.key, t.body]), [rides[0], rides[0], rides[1]].map((r) => [r!.idempotencyKey, r!.body]));
      assert.deepEqual(await journal.pending(), []);
    } finally {
      await s.close();
    }
  });

  it("forgets a ride too old to resume, unsent", async () => {
    const s = await script([ride()]);
    try {
      const journal = memoryJournal();
      const old = { idempotencyKey: "old-ride-0123456789abcdef", body: "origin_lat=1&origin_lon=2&target_lat=3&target_lon=4", recorded: new Date(Date.now() - MAX_RESUME_AGE - 60_000).toISOString() };
      await journal.record(old);
      const { client } = testClient(s.url, { journal });
      const [r, ...more] = await client.resumePending();
      assert.deepEqual(more, []);
      assert.ok(r && "error" in r && r.error instanceof TooOldToResumeError, String(r && "error" in r && r.error));
      assert.equal(s.tries.length, 0);
      assert.deepEqual(await journal.pending(), []);
    } finally {
      await s.close();
    }
  });
});

describe("the protocol's rules", () => {
  it("retries what may still complete, and follows the hint over the status", () => {
    const cases: [number, string | null, boolean, boolean, boolean][] = [
      [503, null, false, true, true], [409, null, false, true, true], [429, null, false, true, true],
      [408, null, false, true, true], [500, null, false, true, true], [502, null, false, false, true],
      [504, null, false, false, true], [502, null, false, true, false], [402, null, false, true, false],
      [422, null, false, true, false], [500, null, true, true, false], [500, "false", false, true, false],
      [400, "TRUE", false, true, true], [503, " false ", false, true, false],
    ];
    for (const [status, hint, replayed, isProblem, want] of cases) {
      assert.equal(shouldRetry(status, hint, replayed, isProblem), want, `${status} hint=${hint} replayed=${replayed}`);
    }
  });

  it("reads Retry-After as seconds or a date", () => {
    const now = Date.parse("2025-01-02T03:04:05Z");
    assert.equal(parseRetryAfter("2", now), 2000);
    assert.equal(parseRetryAfter(new Date(now + 30_000).toUTCString(), now), 30_000);
    assert.equal(parseRetryAfter(new Date(now - 60_000).toUTCString(), now), 0);
    for (const v of [null, "", "soon", "-5"]) assert.equal(parseRetryAfter(v, now), 0, String(v));
  });

  it("doubles the backoff's ceiling up to maxDelay", () => {
    const s = { baseDelay: 500, maxDelay: 5000, jitter: (c: number) => c };
    assert.deepEqual([1, 2, 3, 4, 5, 200].map((n) => waitBefore(s, n, 0, Infinity)), [500, 1000, 2000, 4000, 5000, 5000]);
    const drawn = { ...s, jitter: (c: number) => Math.random() * c };
    for (let i = 0; i < 1000; i++) {
      const w = waitBefore(drawn, 3, 0, Infinity)!;
      assert.ok(w >= 0 && w <= 2000, String(w));
    }
  });
});
