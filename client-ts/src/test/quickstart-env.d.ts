// What the quick start (quickstart.ts) takes from the app around it.

declare const url: string;
declare const token: string;
declare function show(key: string, what: unknown): void;

declare module "@react-native-async-storage/async-storage" {
  const AsyncStorage: import("../journal.js").AsyncStorageLike;
  export default AsyncStorage;
}
