// The client's types are generated from docs/openapi.yaml (npm run
// generate); this keeps them in step with it: a change to the spec that
// is not regenerated fails here, naming the command that fixes it.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const root = fileURLToPath(new URL("../../", import.meta.url));

it("src/openapi.ts is what openapi-typescript makes of docs/openapi.yaml", async () => {
  const dir = await mkdtemp(join(tmpdir(), "rocketrides-openapi-"));
  try {
    const out = join(dir, "openapi.ts");
    const cli = join(root, "node_modules", "openapi-typescript", "bin", "cli.js");
    await promisify(execFile)(process.execPath, [cli, join(root, "..", "docs", "openapi.yaml"), "-o", out], { cwd: root });
    const [want, got] = await Promise.all([readFile(out, "utf8"), readFile(join(root, "src", "openapi.ts"), "utf8")]);
    assert.ok(want.includes('"/rides"'), "the generated types name POST /rides");
    assert.equal(got, want, "src/openapi.ts is out of date: run npm run generate in client-ts/ and commit it");
  } finally {
    await rm(dir, { recursive: true });
  }
});
