// The TypeScript quick start of docs/clients.md, as it stands there: the
// build type-checks it against the client, and quickstart.unit.test.ts
// fails when the document and this file differ.

// npm install ./client-ts (or @rocketrides/client from a registry)
import AsyncStorage from "@react-native-async-storage/async-storage";
import { Client, ProblemError, storageJournal } from "@rocketrides/client";

const client = new Client({ url, token, journal: storageJournal(AsyncStorage) });
// On app start: finish what a killed app left pending.
for (const r of await client.resumePending()) show(r.pending.idempotencyKey, "ride" in r ? r.ride : r.error);
// On a tap:
try {
  const ride = await client.createRide({ origin_lat: 37.7749, origin_lon: -122.4194, target_lat: 37.8044, target_lon: -122.2712 });
  show(ride.idempotencyKey, ride); // succeeded, or pending: poll client.getRide(ride.id)
} catch (err) {
  // A final problem is the rider's answer (card_declined, ...); anything
  // else leaves the ride pending in the journal: "confirming payment".
  show("", err instanceof ProblemError && err.final ? err.code : "confirming payment");
}
