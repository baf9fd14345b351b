// A journal in a file, for node and Electron (node:fs): an entry point of
// its own, so that an app bundled for React Native or the web never
// reaches for node:fs.

import { mkdir, open, readFile, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { formatJournal, listJournal, parseJournal, type Journal } from "./journal.js";

/**
 * A journal in the file at path. Every change writes a temporary file
 * beside it, fsyncs it, renames it over path and fsyncs the directory: a
 * crash at any moment leaves the old list or the new one, never half of
 * either. One process owns the file.
 */
export function fileJournal(path: string): Journal {
  return listJournal({
    load: async () => {
      try {
        return parseJournal(await readFile(path, "utf8"), path);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
        throw err;
      }
    },
    save: async (rides) => {
      await mkdir(dirname(path), { recursive: true, mode: 0o700 });
      const tmp = join(dirname(path), `.${basename(path)}.tmp`);
      try {
        const file = await open(tmp, "w", 0o600);
        try {
          await file.writeFile(formatJournal(rides), "utf8");
          await file.sync();
        } finally {
          await file.close();
        }
        await rename(tmp, path);
      } catch (err) {
        await rm(tmp, { force: true }); // the journal itself is untouched
        throw err;
      }
      // The rename is durable once the directory is.
      const dir = await open(dirname(path), "r");
      try {
        await dir.sync();
      } finally {
        await dir.close();
      }
    },
  });
}
