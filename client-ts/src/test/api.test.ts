// The client against the real api, started by internal/proof/tsclient with
// the Stripe fake and a seeded database:
//
//	RIDES_URL             the api
//	RIDES_TOKEN           a rider whose card works
//	RIDES_DECLINED_TOKEN  a rider whose card is always declined
//	RIDES_STRIPE_URL      the Stripe fake, for its counters and faults
//
// The tests run in order, each counting the charges it makes.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { fileJournal } from "../file-journal.js";
import { Client, memoryJournal, ProblemError, type Ride } from "../index.js";
import { params } from "./script.js";

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: these tests run from internal/proof/tsclient (go test), which starts the api`);
  return v;
}
const url = env("RIDES_URL");
const token = env("RIDES_TOKEN");
const declinedToken = env("RIDES_DECLINED_TOKEN");
const stripe = env("RIDES_STRIPE_URL");

const cli = fileURLToPath(new URL("../cli.js", import.meta.url));

async function charges(): Promise<number> {
  const resp = await fetch(`${stripe}/_fake/stats`);
  return ((await resp.json()) as { charges: number }).charges;
}

async function stripeFaults(faults: Record<string, number>): Promise<void> {
  const resp = await fetch(`${stripe}/_fake/faults`, { method: "POST", body: JSON.stringify(faults) });
  assert.equal(resp.status, 200, await resp.text());
}

/** Polls check every 50 ms until it returns a value, for at most a minute. */
async function eventually<T>(what: string, check: () => Promise<T | undefined>): Promise<T> {
  const end = Date.now() + 60_000;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`waited a minute for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("against the api", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "rocketrides-api-"));
  });
  after(async () => {
    await rm(dir, { recursive: true });
  });

  it("creates a ride, charged once, and forgets it", async () => {
    const journal = memoryJournal();
    const client = new Client({ url, token, journal });
    const before = await charges();
    const ride = await client.createRide(params);
    assert.equal(ride.status, "succeeded");
    assert.match(ride.stripe_charge_id ?? "", /^ch_/);
    assert.equal(ride.replayed, false);
    assert.deepEqual(await journal.pending(), []);
    assert.equal(await charges(), before + 1);
    const { replayed: _replayed, idempotencyKey: _key, ...plain } = ride;
    assert.deepEqual(await client.getRide(ride.id), plain);
    const page = await client.listRides({ limit: 100, status: "succeeded" });
    assert.ok(page.data.some((r: Ride) => r.id === ride.id), "the ride is listed");
  });

  it("replays a ride asked for again with its key, without charging again", async () => {
    const client = new Client({ url, token });
    const first = await client.createRide(params);
    const before = await charges();
    const again = await client.createRide(params, { idempotencyKey: first.idempotencyKey });
    assert.equal(again.replayed, true);
    assert.equal(again.id, first.id);
    assert.equal(await charges(), before);
  });

  it("gives a final 422 naming a bad parameter, with one try", async () => {
    const journal = memoryJournal();
    let tries = 0;
    const client = new Client({ url, token, journal, onAttempt: () => tries++ });
    const err = await client.createRide({ ...params, origin_lat: 91 }).then(() => assert.fail("resolved"), (e: unknown) => e);
    assert.ok(err instanceof ProblemError, String(err));
    assert.equal(err.status, 422);
    assert.equal(err.code, "invalid_params");
    assert.equal(err.final, true);
    assert.deepEqual(err.invalidParams.map((p) => p.name), ["origin_lat"]);
    assert.equal(tries, 1);
    assert.deepEqual(await journal.pending(), []);
  });

  it("gives a final 402 for a declined card, naming the declined ride", async () => {
    const client = new Client({ url, token: declinedToken });
    const err = await client.createRide(params).then(() => assert.fail("resolved"), (e: unknown) => e);
    assert.ok(err instanceof ProblemError, String(err));
    assert.equal(err.status, 402);
    assert.equal(err.code, "card_declined");
    assert.equal(err.final, true);
    assert.ok(err.rideId);
    assert.equal((await client.getRide(err.rideId)).status, "declined");
  });

  it("resumes a ride from its journal after the process died mid-request", async () => {
    const path = join(dir, "killed.json");
    const client = new Client({ url, token });
    const before = await charges();
    const pendingBefore = (await client.listRides({ limit: 100, status: "pending" })).data.length;
    // The charge takes a while, so that the process is killed while its
    // request is in flight.
    await stripeFaults({ latency_ms: 60_000 });
    const first = spawn(process.execPath, [cli], { env: { ...process.env, RIDES_URL: url, RIDES_TOKEN: token, RIDES_JOURNAL: path }, stdio: "ignore" });
    const exited = new Promise((resolve) => first.on("exit", (_, signal) => resolve(signal)));
    try {
      // In flight: the ride exists, pending, and the charge has not been made.
      await eventually("the ride to be created", async () => {
        const page = await client.listRides({ limit: 100, status: "pending" });
        return page.data.length > pendingBefore ? true : undefined;
      });
      first.kill("SIGKILL");
      assert.equal(await exited, "SIGKILL");
    } finally {
      await stripeFaults({ latency_ms: 0 });
    }
    const [pending] = await fileJournal(path).pending();
    assert.ok(pending, "the killed process left its ride in the journal");

    // The app starts again, as often as it takes (each start has a few
    // tries): every start resumes the journal's ride, none makes a new one.
    const runs: { key: string; resumed: boolean; status?: unknown }[] = [];
    await eventually("the journal to be empty", async () => {
      runs.push(...(await runCLI(path)));
      return (await fileJournal(path).pending()).length === 0 ? true : undefined;
    });
    for (const r of runs) assert.deepEqual([r.key, r.resumed], [pending.idempotencyKey, true], JSON.stringify(runs));
    const last = runs[runs.length - 1]!;
    assert.equal(last.status, "succeeded", JSON.stringify(runs));
    assert.equal(await charges(), before + 1);
    // The same bytes: the key's request is replayed, not refused as reused.
    const again = await client.resumeRide(pending);
    assert.equal(again.replayed, true);
    assert.equal(again.status, "succeeded");
  });
});

/** Runs the command once with the journal at path, and returns the rides it printed. */
function runCLI(path: string): Promise<{ key: string; resumed: boolean; status?: unknown }[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cli], { env: { ...process.env, RIDES_URL: url, RIDES_TOKEN: token, RIDES_JOURNAL: path }, stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (s: string) => (out += s));
    child.on("error", reject);
    child.on("exit", () => resolve(out.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l))));
  });
}
