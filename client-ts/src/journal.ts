// The journal of pending rides: how a ride survives the app's death. The
// client records a ride's key and body bytes before its first try, and
// forgets them only on a final answer; an app killed at any point finds the
// ride here when it starts again and resumes it with the same key and
// bytes, so that one tap never makes two rides.

/** A ride request sent, or about to be, whose final answer has not arrived. */
export interface PendingRide {
  /** The Idempotency-Key every try sends. */
  idempotencyKey: string;
  /**
   * The form every try sends, byte for byte (ASCII): a resumed ride sends
   * it again rather than encoding its parameters anew.
   */
  body: string;
  /** When the ride was recorded, before its first try (RFC 3339). */
  recorded: string;
}

/**
 * Where the client keeps its pending rides. record must be durable when it
 * resolves: the client sends the ride's first try only then.
 */
export interface Journal {
  record(ride: PendingRide): Promise<void>;
  remove(key: string): Promise<void>;
  /** The pending rides, oldest first. */
  pending(): Promise<PendingRide[]>;
}

/** An AsyncStorage-style store: React Native's AsyncStorage, or localStorage wrapped. */
export interface AsyncStorageLike {
  getItem(key: string): Promise<string | null>;
  setItem(key: string, value: string): Promise<void>;
  removeItem(key: string): Promise<void>;
}

/** The whole list of pending rides, read and written at once. */
export interface JournalStore {
  load(): Promise<PendingRide[]>;
  save(rides: PendingRide[]): Promise<void>;
}

/**
 * A Journal over a store that reads and writes the whole list at once.
 * Its operations run one at a time, so that two rides recorded together
 * both stay; one journal serves one process.
 */
export function listJournal(store: JournalStore): Journal {
  let queue: Promise<unknown> = Promise.resolve();
  const serial = <T>(op: () => Promise<T>): Promise<T> => {
    const run = queue.then(op, op);
    queue = run.catch(() => undefined);
    return run;
  };
  return {
    record: (ride) =>
      serial(async () => {
        const rides = await store.load();
        await store.save([...rides.filter((r) => r.idempotencyKey !== ride.idempotencyKey), ride]);
      }),
    remove: (key) =>
      serial(async () => {
        const rides = await store.load();
        if (rides.some((r) => r.idempotencyKey === key)) await store.save(rides.filter((r) => r.idempotencyKey !== key));
      }),
    pending: () => serial(() => store.load()),
  };
}

/** A journal in memory: the contract without the durability, for tests and for an app that opts out. */
export function memoryJournal(): Journal {
  let rides: PendingRide[] = [];
  return listJournal({
    load: async () => rides.map((r) => ({ ...r })),
    save: async (next) => {
      rides = next.map((r) => ({ ...r }));
    },
  });
}

/** The item a storageJournal keeps its rides under, unless told another. */
export const DEFAULT_STORAGE_ITEM = "rocketrides.pendingRides";

/**
 * A journal in an AsyncStorage-style store, as one item holding every
 * pending ride: one setItem writes a change whole.
 */
export function storageJournal(storage: AsyncStorageLike, item: string = DEFAULT_STORAGE_ITEM): Journal {
  return listJournal({
    load: async () => parseJournal(await storage.getItem(item), `storage item ${item}`),
    save: async (rides) => {
      if (rides.length === 0) await storage.removeItem(item);
      else await storage.setItem(item, formatJournal(rides));
    },
  });
}

/**
 * The journal's text, the Go client's file format (client/journal.go):
 * {"pending": [{"idempotency_key", "body", "recorded"}, ...]}.
 */
export function formatJournal(rides: PendingRide[]): string {
  return JSON.stringify({ pending: rides.map((r) => ({ idempotency_key: r.idempotencyKey, body: r.body, recorded: r.recorded })) });
}

/**
 * Reads formatJournal's text; null is an empty journal. Anything else it
 * refuses, naming where: a journal that cannot be read must not be taken
 * for an empty one, or its rides would be made again.
 */
export function parseJournal(text: string | null, where: string): PendingRide[] {
  if (text === null) return [];
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new Error(`the journal ${where} is not a journal: ${String(err)}`);
  }
  const pending = doc !== null && typeof doc === "object" && !Array.isArray(doc) ? ((doc as { pending?: unknown }).pending ?? []) : undefined;
  if (!Array.isArray(pending)) throw new Error(`the journal ${where} is not a journal: want {"pending": [...]}`);
  return pending.map((r: unknown, i: number) => {
    const ride = (r ?? {}) as Record<string, unknown>;
    for (const field of ["idempotency_key", "body", "recorded"]) {
      if (typeof ride[field] !== "string" || ride[field] === "") {
        throw new Error(`the journal ${where} is not a journal: ride ${i} has no ${field}`);
      }
    }
    if (Number.isNaN(Date.parse(ride.recorded as string))) {
      throw new Error(`the journal ${where} is not a journal: ride ${i} was recorded at ${JSON.stringify(ride.recorded)}, not a time`);
    }
    return { idempotencyKey: ride.idempotency_key as string, body: ride.body as string, recorded: ride.recorded as string };
  });
}
