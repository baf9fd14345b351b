// Package otlpsink is an OTLP trace receiver for tests and the bench: it
// takes the spans real processes export, over gRPC and over HTTP
// (http/protobuf), and gives them back through the same query API Jaeger's
// UI reads, GET /api/traces/{traceID}, with a page a person can open at
// /trace/{traceID}. A test reads a ride's trace the way an operator reads
// it in Jaeger, without building Jaeger into the suite.
package otlpsink

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Sink is a running receiver. GRPC is the endpoint URL for
// OTEL_EXPORTER_OTLP_PROTOCOL=grpc, and HTTP the one for http/protobuf,
// which is also the base of the query API and the trace pages.
type Sink struct {
	GRPC, HTTP string

	mu     sync.Mutex
	spans  map[string][]Span // by trace id
	count  int
	notify chan struct{} // closed and replaced at every export

	grpcServer *grpc.Server
	httpServer *http.Server
}

// Span is one received span in the shape of Jaeger's query API.
type Span struct {
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	References    []Reference `json:"references"`
	StartTime     int64       `json:"startTime"` // microseconds since the epoch
	Duration      int64       `json:"duration"`  // microseconds
	Tags          []Tag       `json:"tags"`
	ProcessID     string      `json:"processID"`

	service string
}

// Reference is a span's parent (CHILD_OF) or a link (FOLLOWS_FROM), as
// Jaeger shows an OTLP link.
type Reference struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// Tag is an attribute of a span.
type Tag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// Trace is one trace as GET /api/traces/{traceID} answers it.
type Trace struct {
	TraceID   string             `json:"traceID"`
	Spans     []Span             `json:"spans"`
	Processes map[string]Process `json:"processes"`
}

// Process is the service that sent a trace's spans.
type Process struct {
	ServiceName string `json:"serviceName"`
}

// Start starts a sink on loopback ports of its own; Close stops it.
func Start() (*Sink, error) {
	s := &Sink{spans: map[string][]Span{}, notify: make(chan struct{})}
	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = grpcLn.Close()
		return nil, err
	}
	s.grpcServer = grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s.grpcServer, &grpcReceiver{sink: s})
	go func() { _ = s.grpcServer.Serve(grpcLn) }()

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", s.receiveHTTP)
	mux.HandleFunc("GET /api/traces/{id}", s.serveTrace)
	mux.HandleFunc("GET /trace/{id}", s.servePage)
	s.httpServer = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.httpServer.Serve(httpLn) }()

	s.GRPC = "http://" + grpcLn.Addr().String()
	s.HTTP = "http://" + httpLn.Addr().String()
	return s, nil
}

// Close stops the sink.
func (s *Sink) Close() {
	s.grpcServer.Stop()
	_ = s.httpServer.Close()
}

// Env is what points a process at the sink over protocol (grpc or
// http/protobuf), every trace sampled and every span sent within a tenth
// of a second.
func (s *Sink) Env(protocol string) []string {
	endpoint := s.GRPC
	if protocol == "http/protobuf" {
		endpoint = s.HTTP
	}
	return []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
		"OTEL_TRACES_SAMPLER=always_on",
		"OTEL_BSP_SCHEDULE_DELAY=100",
	}
}

// Count is how many spans the sink has received.
func (s *Sink) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// Await waits until ok holds of the spans received, or ctx ends; it
// returns ok's last answer.
func (s *Sink) Await(ctx context.Context, ok func(spans []Span) bool) bool {
	for {
		s.mu.Lock()
		var all []Span
		for _, spans := range s.spans {
			all = append(all, spans...)
		}
		notify := s.notify
		s.mu.Unlock()
		if ok(all) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-notify:
		}
	}
}

// receive stores the spans of one export.
func (s *Sink) receive(req *coltracepb.ExportTraceServiceRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				span := convert(sp, service)
				s.spans[span.TraceID] = append(s.spans[span.TraceID], span)
				s.count++
			}
		}
	}
	close(s.notify)
	s.notify = make(chan struct{})
}

// grpcReceiver is the sink's OTLP/gRPC trace service.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	sink *Sink
}

func (r *grpcReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.sink.receive(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// receiveHTTP is OTLP/HTTP with a protobuf body.
func (s *Sink) receiveHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(body, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.receive(req)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Trace is the trace with id as the query API answers it; false when no
// span of it has arrived.
func (s *Sink) Trace(id string) (Trace, bool) {
	s.mu.Lock()
	spans := slices.Clone(s.spans[id])
	s.mu.Unlock()
	if len(spans) == 0 {
		return Trace{}, false
	}
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].StartTime < spans[j].StartTime })
	t := Trace{TraceID: id, Processes: map[string]Process{}}
	ids := map[string]string{}
	for _, span := range spans {
		pid, ok := ids[span.service]
		if !ok {
			pid = "p" + strconv.Itoa(len(ids)+1)
			ids[span.service] = pid
			t.Processes[pid] = Process{ServiceName: span.service}
		}
		span.ProcessID = pid
		t.Spans = append(t.Spans, span)
	}
	return t, true
}

// serveTrace answers GET /api/traces/{id} as Jaeger's query API does:
// {"data": [trace]}, 404 with no data when the trace is unknown.
func (s *Sink) serveTrace(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	t, ok := s.Trace(r.PathValue("id"))
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]any{"data": nil, "errors": []map[string]any{{"code": 404, "msg": "trace not found"}}})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"data": []Trace{t}})
}

var page = template.Must(template.New("trace").Parse(`<!doctype html>
<title>Trace {{.TraceID}}</title>
<h1>Trace <code>{{.TraceID}}</code></h1>
<table>
<tr><th>span</th><th>service</th><th>µs</th><th>attributes</th></tr>
{{range .Spans}}<tr class="span"><td>{{.OperationName}}</td><td>{{(index $.Processes .ProcessID).ServiceName}}</td><td>{{.Duration}}</td><td>{{range .Tags}}{{.Key}}={{.Value}} {{end}}</td></tr>
{{end}}</table>`))

// servePage answers GET /trace/{id} with the trace as a page, where
// Jaeger's UI has its own.
func (s *Sink) servePage(w http.ResponseWriter, r *http.Request) {
	t, ok := s.Trace(r.PathValue("id"))
	if !ok {
		http.Error(w, "trace not found", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = page.Execute(w, t)
}

// convert is sp, of service, in the query API's shape.
func convert(sp *tracepb.Span, service string) Span {
	span := Span{
		TraceID:       hex.EncodeToString(sp.GetTraceId()),
		SpanID:        hex.EncodeToString(sp.GetSpanId()),
		OperationName: sp.GetName(),
		StartTime:     int64(sp.GetStartTimeUnixNano() / 1000),
		Duration:      int64((sp.GetEndTimeUnixNano() - sp.GetStartTimeUnixNano()) / 1000),
		References:    []Reference{},
		Tags:          []Tag{},
		service:       service,
	}
	if parent := sp.GetParentSpanId(); len(parent) > 0 {
		span.References = append(span.References, Reference{RefType: "CHILD_OF", TraceID: span.TraceID, SpanID: hex.EncodeToString(parent)})
	}
	for _, l := range sp.GetLinks() {
		span.References = append(span.References, Reference{RefType: "FOLLOWS_FROM", TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
	}
	for _, kv := range sp.GetAttributes() {
		span.Tags = append(span.Tags, tag(kv))
	}
	if st := sp.GetStatus(); st.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		span.Tags = append(span.Tags, Tag{Key: "error", Type: "bool", Value: true}, Tag{Key: "otel.status_description", Type: "string", Value: st.GetMessage()})
	}
	return span
}

// tag is kv as a query API tag.
func tag(kv *commonpb.KeyValue) Tag {
	v := kv.GetValue()
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return Tag{Key: kv.GetKey(), Type: "string", Value: x.StringValue}
	case *commonpb.AnyValue_IntValue:
		return Tag{Key: kv.GetKey(), Type: "int64", Value: x.IntValue}
	case *commonpb.AnyValue_BoolValue:
		return Tag{Key: kv.GetKey(), Type: "bool", Value: x.BoolValue}
	case *commonpb.AnyValue_DoubleValue:
		return Tag{Key: kv.GetKey(), Type: "float64", Value: x.DoubleValue}
	default:
		return Tag{Key: kv.GetKey(), Type: "string", Value: fmt.Sprint(v)}
	}
}

// Tag is the value of the span's attribute key, and whether it has one.
func (sp Span) Tag(key string) (any, bool) {
	for _, t := range sp.Tags {
		if t.Key == key {
			return t.Value, true
		}
	}
	return nil, false
}

// Read reads the trace with id from the query API at base: a sink's
// HTTP, or a running Jaeger's UI address, which answers alike.
func Read(ctx context.Context, base, id string) (Trace, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/traces/"+id, nil)
	if err != nil {
		return Trace{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Trace{}, err
	}
	defer resp.Body.Close()
	var answer struct {
		Data []Trace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return Trace{}, fmt.Errorf("read trace %s: %s: %w", id, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK || len(answer.Data) != 1 {
		return Trace{}, fmt.Errorf("read trace %s: %s, %d traces", id, resp.Status, len(answer.Data))
	}
	return answer.Data[0], nil
}

// Service is the name of the service that sent span, in t.
func (t Trace) Service(span Span) string { return t.Processes[span.ProcessID].ServiceName }

// Named is t's spans called name.
func (t Trace) Named(name string) []Span {
	var out []Span
	for _, sp := range t.Spans {
		if sp.OperationName == name {
			out = append(out, sp)
		}
	}
	return out
}
