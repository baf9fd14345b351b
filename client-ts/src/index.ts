// The TypeScript client of the Rocket Rides API (docs/clients.md): the
// retry protocol of docs/openapi.yaml, and a journal of pending rides that
// lets a ride survive the app's death. No dependencies; nothing that React
// Native lacks is assumed. fileJournal (node:fs) is in
// "@rocketrides/client/file-journal".

export { Client, DEFAULTS, form, isFinal, MAX_RESUME_AGE, TooOldToResumeError, uuidFrom } from "./client.js";
export type { Config, CreatedRide, CreateRideOptions, Resumed, Ride, RideList, RideParams, RideStatus } from "./client.js";
export { DEFAULT_STORAGE_ITEM, listJournal, memoryJournal, storageJournal } from "./journal.js";
export type { AsyncStorageLike, Journal, JournalStore, PendingRide } from "./journal.js";
export { NoAnswerError, ProblemError, SHOULD_RETRY_HEADER, parseRetryAfter, shouldRetry } from "./retry.js";
export type { Attempt, InvalidParam, ProblemCode, RequestOptions } from "./retry.js";
export type { components, paths } from "./openapi.js";
