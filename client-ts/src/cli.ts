// The command cmd/clientcheck runs (docs/clients.md, "Checking a client"):
// what an app does when it starts and its rider taps once. It resumes
// every ride pending in its journal and, only when none was, creates one
// new ride; then it exits, printing one JSON line per ride.
//
//	RIDES_URL      the API's base URL (required)
//	RIDES_TOKEN    the API token (required)
//	RIDES_JOURNAL  the file of its journal; without it the journal is in
//	               memory and a ride does not survive the process's death

import { randomUUID } from "node:crypto";
import { fileJournal } from "./file-journal.js";
import { Client, NoAnswerError, ProblemError, type Attempt, type CreatedRide } from "./index.js";

/** The whole budget of one ride; the harness's cases end well within it. */
const rideTimeout = 60_000;

/** The ride a tap asks for: San Francisco to Oakland. */
const params = { origin_lat: 37.7749, origin_lon: -122.4194, target_lat: 37.8044, target_lon: -122.2712 };

function describe(key: string, resumed: boolean, outcome: { ride: CreatedRide } | { error: unknown }): Record<string, unknown> {
  const out: Record<string, unknown> = { key, resumed };
  if ("ride" in outcome) {
    Object.assign(out, { id: outcome.ride.id, status: outcome.ride.status, replayed: outcome.ride.replayed });
  } else if (outcome.error instanceof ProblemError) {
    Object.assign(out, { status: outcome.error.status, code: outcome.error.code, final: outcome.error.final, ride_id: outcome.error.rideId });
  } else {
    out.error = String(outcome.error);
  }
  return out;
}

/** An attempt as one logfmt line, as the Go client's Attempt.String writes it. */
function logfmt(a: Attempt): string {
  const parts = [`method=${a.method}`, `path=${a.path}`];
  if (a.idempotencyKey) parts.push(`key=${a.idempotencyKey}`);
  parts.push(`attempt=${a.n}`, a.status === undefined ? `error=${JSON.stringify(String(a.error))}` : `status=${a.status}`);
  if (a.code) parts.push(`code=${a.code}`);
  if (a.rideId) parts.push(`ride=${a.rideId}`);
  if (a.replayed) parts.push("replayed=true");
  parts.push(`latency=${a.latency}ms`);
  if (a.retry) parts.push(`retry_in=${Math.round(a.wait)}ms`);
  return parts.join(" ");
}

async function main(): Promise<number> {
  const { RIDES_URL: url, RIDES_TOKEN: token, RIDES_JOURNAL: journalPath } = process.env;
  if (!url || !token) {
    console.error("cli: RIDES_URL and RIDES_TOKEN are required");
    return 2;
  }
  const client = new Client({
    url,
    token,
    journal: journalPath ? fileJournal(journalPath) : undefined,
    newKey: randomUUID,
    onAttempt: (a) => console.error(logfmt(a)),
  });
  const results: Record<string, unknown>[] = [];
  for (const r of await client.resumePending({ timeout: rideTimeout })) {
    results.push(describe(r.pending.idempotencyKey, true, r));
  }
  if (results.length === 0) {
    try {
      const ride = await client.createRide(params, { timeout: rideTimeout });
      results.push(describe(ride.idempotencyKey, false, { ride }));
    } catch (error) {
      const key = error instanceof ProblemError || error instanceof NoAnswerError ? (error.idempotencyKey ?? "") : "";
      results.push(describe(key, false, { error }));
    }
  }
  for (const r of results) console.log(JSON.stringify(r));
  return results.every((r) => r.error === undefined && (r.code === undefined || r.code === "")) ? 0 : 1;
}

process.exitCode = await main();
