// A scripted server for the unit tests: it answers each try with the next
// of its answers (the last one again once they run out) and records every
// try, as the Go client's tests do (client/client_test.go).

import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Client, type Config, type Attempt } from "../index.js";

export interface Try {
  key: string | undefined;
  body: string;
  contentType: string | undefined;
}

export type Answer = (res: ServerResponse, req: IncomingMessage) => void;

export interface Script {
  url: string;
  tries: Try[];
  close(): Promise<void>;
}

export async function script(answers: Answer[]): Promise<Script> {
  const tries: Try[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => (body += chunk));
    req.on("end", () => {
      const n = Math.min(tries.length, answers.length - 1);
      tries.push({ key: req.headers["idempotency-key"] as string | undefined, body, contentType: req.headers["content-type"] });
      answers[n]!(res, req);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    tries,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A problem answer, with headers given as name, value pairs. */
export function problem(status: number, code: string, ...header: string[]): Answer {
  return (res) => {
    for (let i = 0; i + 1 < header.length; i += 2) res.setHeader(header[i]!, header[i + 1]!);
    res.writeHead(status, { "Content-Type": "application/problem+json" });
    res.end(JSON.stringify({ type: `/errors#${code}`, title: "t", status, code, ride_id: 42 }));
  };
}

/** The 201 of a ride, replayed or not. */
export function ride(replayed = false): Answer {
  return (res) => {
    if (replayed) res.setHeader("Idempotent-Replayed", "true");
    res.writeHead(201, { "Content-Type": "application/json" });
    res.end(
      JSON.stringify({
        id: 42, created_at: "2024-05-01T12:00:00.123456Z", status: "succeeded",
        origin_lat: 1, origin_lon: 2, target_lat: 3, target_lon: 4, amount: 2000, currency: "usd", stripe_charge_id: "ch_1",
      }),
    );
  };
}

/** No answer: the connection is closed once the request has arrived whole. */
export const cut: Answer = (res) => res.socket?.destroy();

/** A proxy's error page: not a problem document. */
export function page(status: number): Answer {
  return (res) => {
    res.writeHead(status, { "Content-Type": "text/html" });
    res.end("<html>bad gateway</html>");
  };
}

/**
 * A client of url whose waits are recorded, not slept, and whose jitter
 * always draws the ceiling.
 */
export function testClient(url: string, config: Partial<Config> = {}): { client: Client; waits: number[]; attempts: Attempt[] } {
  const waits: number[] = [];
  const attempts: Attempt[] = [];
  const client = new Client({
    url,
    token: "rr_test_token",
    jitter: (ceiling) => ceiling,
    sleep: async (ms) => {
      waits.push(ms);
    },
    onAttempt: (a) => attempts.push(a),
    ...config,
  });
  return { client, waits, attempts };
}

export const params = { origin_lat: 37.7749, origin_lon: -122.4194, target_lat: 37.8044, target_lon: -122.2712 };
