// Package traces proves the traces of a ride: the span tree one request
// makes, and the links that join the traces of one ride across processes
// and time (a replay, the completer's resume, the receipt job), read back
// from the OpenTelemetry SDK's in-memory exporter. The same traces sent
// by real processes to a real OTLP receiver, and read back through its
// query API, are package e2e's TestTraceExported.
package traces
