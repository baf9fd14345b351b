// The journal of pending rides: how a ride survives the app's death. The
// client records a ride's key and body bytes before its first try, and
// forgets them only on a final answer; an app killed at any point finds the
// ride here when it starts again and resumes it with the same key and
// bytes, so that one tap never makes two rides.

/** A ride request sent, or about to be, whose final answer has not arrived. */
export interface PendingRide {
  /** The Idempotency-Key every try sends. */
  key: string;
  /** The body every try sends, byte for byte (a form: ASCII). */
  body: string;
  contentType: string;
  /** When the ride was first recorded (RFC 3339): a key lives 72 hours. */
  createdAt: string;
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
        await store.save([...rides.filter((r) => r.key !== ride.key), ride]);
      }),
    remove: (key) =>
      serial(async () => {
        const rides = await store.load();
        if (rides.some((r) => r.key === key)) await store.save(rides.filter((r) => r.key !== key));
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

/** The journal's text: a version, so that a later format can read it, and the rides. */
export function formatJournal(rides: PendingRide[]): string {
  return JSON.stringify({ version: 1, rides });
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
    throw new Error(`journal ${where}: not JSON: ${String(err)}`);
  }
  const d = doc as { version?: unknown; rides?: unknown };
  if (d === null || typeof d !== "object" || d.version !== 1 || !Array.isArray(d.rides)) {
    throw new Error(`journal ${where}: want {"version":1,"rides":[...]}`);
  }
  return d.rides.map((r: unknown, i: number) => {
    const ride = r as Partial<PendingRide> | null;
    for (const field of ["key", "body", "contentType", "createdAt"] as const) {
      if (typeof ride?.[field] !== "string" || ride[field] === "") {
        throw new Error(`journal ${where}: ride ${i} has no ${field}`);
      }
    }
    return ride as PendingRide;
  });
}
