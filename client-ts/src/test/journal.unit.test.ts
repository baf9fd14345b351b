// The journals: each keeps what it records until it is removed, across a
// new instance where it is durable, and refuses to read a damaged one as
// empty.

import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileJournal } from "../file-journal.js";
import { DEFAULT_STORAGE_ITEM, memoryJournal, storageJournal, type AsyncStorageLike, type Journal, type PendingRide } from "../index.js";

function pendingRide(key: string): PendingRide {
  return { idempotencyKey: key, body: `origin_lat=1&origin_lon=2&target_lat=3&target_lon=4&n=${key}`, recorded: "2025-01-02T03:04:05.000Z" };
}

/** An in-memory AsyncStorage, as React Native's would behave. */
function fakeAsyncStorage(): AsyncStorageLike & { items: Map<string, string> } {
  const items = new Map<string, string>();
  return {
    items,
    getItem: async (k) => items.get(k) ?? null,
    setItem: async (k, v) => void items.set(k, v),
    removeItem: async (k) => void items.delete(k),
  };
}

async function tempDir(): Promise<string> {
  return mkdtemp(join(tmpdir(), "rocketrides-journal-"));
}

/** The contract every journal keeps; reopen gives a second instance over the same storage. */
function contract(name: string, open: () => Promise<{ journal: Journal; reopen: () => Journal; done: () => Promise<void> }>) {
  describe(name, () => {
    it("keeps what it records, oldest first, until it is removed", async () => {
      const { journal, reopen, done } = await open();
      try {
        assert.deepEqual(await journal.pending(), []);
        await journal.record(pendingRide("a-0123456789abcdefghij"));
        await journal.record(pendingRide("b-0123456789abcdefghij"));
        assert.deepEqual(await reopen().pending(), [pendingRide("a-0123456789abcdefghij"), pendingRide("b-0123456789abcdefghij")]);
        await journal.remove("a-0123456789abcdefghij");
        await journal.remove("no-such-key-0123456789");
        assert.deepEqual(await reopen().pending(), [pendingRide("b-0123456789abcdefghij")]);
        await journal.remove("b-0123456789abcdefghij");
        assert.deepEqual(await reopen().pending(), []);
      } finally {
        await done();
      }
    });

    it("keeps every ride of changes made at once", async () => {
      const { journal, reopen, done } = await open();
      try {
        const keys = Array.from({ length: 20 }, (_, i) => `ride-${i}-0123456789abcdefghij`);
        await Promise.all(keys.map((k) => journal.record(pendingRide(k))));
        await Promise.all(keys.slice(0, 10).map((k) => journal.remove(k)));
        assert.deepEqual((await reopen().pending()).map((r) => r.idempotencyKey), keys.slice(10));
      } finally {
        await done();
      }
    });
  });
}

contract("memoryJournal", async () => {
  const journal = memoryJournal();
  return { journal, reopen: () => journal, done: async () => undefined };
});

contract("storageJournal", async () => {
  const storage = fakeAsyncStorage();
  return { journal: storageJournal(storage), reopen: () => storageJournal(storage), done: async () => undefined };
});

contract("fileJournal", async () => {
  const dir = await tempDir();
  const path = join(dir, "journal.json");
  return { journal: fileJournal(path), reopen: () => fileJournal(path), done: () => rm(dir, { recursive: true }) };
});

describe("storageJournal", () => {
  it("keeps the rides in one item, removed once none is pending", async () => {
    const storage = fakeAsyncStorage();
    const journal = storageJournal(storage);
    await journal.record(pendingRide("a-0123456789abcdefghij"));
    assert.deepEqual([...storage.items.keys()], [DEFAULT_STORAGE_ITEM]);
    await journal.remove("a-0123456789abcdefghij");
    assert.equal(storage.items.size, 0);
  });

  it("refuses a damaged item rather than read it as empty", async () => {
    const storage = fakeAsyncStorage();
    for (const [text, why] of [
      ['{"pending":[{"idempotency_key":"k"}]}', /ride 0 has no body/],
      ['{"pending":[{"idempotency_key":"k","body":"b","recorded":"yesterday"}]}', /not a time/],
      ['{"pending":{}}', /want \{"pending"/],
      ["[]", /want \{"pending"/],
      ["{not json", /is not a journal/],
    ] as const) {
      storage.items.set(DEFAULT_STORAGE_ITEM, text);
      await assert.rejects(storageJournal(storage).pending(), why, text);
    }
  });
});

describe("fileJournal", () => {
  it("writes the Go client's format, and reads it", async () => {
    const dir = await tempDir();
    try {
      const path = join(dir, "journal.json");
      await fileJournal(path).record(pendingRide("a-0123456789abcdefghij"));
      const want = { idempotency_key: "a-0123456789abcdefghij", body: pendingRide("a-0123456789abcdefghij").body, recorded: "2025-01-02T03:04:05.000Z" };
      assert.deepEqual(JSON.parse(await readFile(path, "utf8")), { pending: [want] });
      // As Go's encoding/json writes a time: nanoseconds, an offset.
      await writeFile(path, JSON.stringify({ pending: [{ ...want, recorded: "2025-01-02T04:04:05.123456789+01:00" }] }));
      assert.deepEqual(await fileJournal(path).pending(), [{ ...pendingRide("a-0123456789abcdefghij"), recorded: "2025-01-02T04:04:05.123456789+01:00" }]);
    } finally {
      await rm(dir, { recursive: true });
    }
  });

  it("leaves no temporary file behind, and refuses a damaged file", async () => {
    const dir = await tempDir();
    try {
      const path = join(dir, "journal.json");
      const journal = fileJournal(path);
      await journal.record(pendingRide("a-0123456789abcdefghij"));
      assert.deepEqual(await readdir(dir), ["journal.json"]);
      await assert.rejects(fileJournal(join(dir, "journal.json", "x")).record(pendingRide("b-0123456789abcdefghij")));
      assert.deepEqual(await readdir(dir), ["journal.json"], "a failed write leaves the journal alone");
      await writeFile(path, "[1]");
      await assert.rejects(fileJournal(path).pending(), /journal.json is not a journal/);
    } finally {
      await rm(dir, { recursive: true });
    }
  });
});
