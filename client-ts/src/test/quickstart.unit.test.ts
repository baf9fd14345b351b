// The quick start in docs/clients.md is quickstart.ts, which the build
// type-checks: a change to the client that breaks the document fails the
// build, and an edit of one that is not made to the other fails here.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { it } from "node:test";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../../", import.meta.url));

it("docs/clients.md's TypeScript quick start is src/test/quickstart.ts", async () => {
  const doc = await readFile(`${root}../docs/clients.md`, "utf8");
  const blocks = [...doc.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
  assert.equal(blocks.length, 1, "docs/clients.md has one ts block");
  const file = await readFile(`${root}src/test/quickstart.ts`, "utf8");
  assert.equal(file.slice(file.indexOf("\n\n") + 2), blocks[0], "copy docs/clients.md's ts block into src/test/quickstart.ts, after its header");
});
