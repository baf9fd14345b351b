// Package trace sends every process's OpenTelemetry traces to an OTLP
// receiver (Jaeger, a collector), configured the OpenTelemetry way: the
// standard OTEL_* variables. Without OTEL_EXPORTER_OTLP_ENDPOINT nothing is
// set up: the global tracer provider stays OpenTelemetry's no-op one, the
// HTTP, Postgres and River instrumentation is not even installed (On), and
// tracing costs a request nothing.
//
// process.Main calls Setup for every process before it builds anything.
// The mechanism's own spans (the claim, each atomic phase named by the
// recovery points it moves between, the Stripe call, a replay, a refusal,
// a fence that refuses) are started by the packages that own them, with
// Start and the attributes below. A span carries the key's id and the
// user's id, never a token, a client's Idempotency-Key or a card.
//
// A ride crosses time: its key and its staged receipt job keep the
// traceparent of the request that wrote them (Traceparent), and the
// completer's resume, a client's later retry and the receipt job link back
// to it (Link).
package trace

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// The OpenTelemetry settings the project reads. The SDK reads the rest of
// the standard ones itself (OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_RESOURCE_ATTRIBUTES...); none of them
// has one of the project's prefixes, so none is refused as unknown.
const (
	EndpointSetting   = "OTEL_EXPORTER_OTLP_ENDPOINT"
	ProtocolSetting   = "OTEL_EXPORTER_OTLP_PROTOCOL"
	ServiceSetting    = "OTEL_SERVICE_NAME"
	SamplerSetting    = "OTEL_TRACES_SAMPLER"
	SamplerArgSetting = "OTEL_TRACES_SAMPLER_ARG"
)

// Defaults of Config.
const (
	// DefaultProtocol is OTLP over gRPC, the OpenTelemetry default.
	DefaultProtocol = "grpc"
	// DefaultSampler samples a share of new traces (SamplerArg) and
	// follows a caller's decision: a busy api exports a tenth of its rides
	// unless told otherwise, and every span of a sampled ride.
	DefaultSampler = "parentbased_traceidratio"
	// DefaultSamplerArg is the share DefaultSampler samples.
	DefaultSamplerArg = 0.1
)

// Variables are the tracing settings, read by every process (process.Main).
var Variables = config.Declare(
	config.Setting{Name: EndpointSetting, Type: config.TypeURL,
		Help: "send traces to this OTLP receiver (http://127.0.0.1:4317 for grpc, :4318 for http/protobuf); unset traces nothing"},
	config.Setting{Name: ProtocolSetting, Type: config.TypeString,
		Help: "the OTLP protocol: grpc or http/protobuf"},
	config.Setting{Name: ServiceSetting, Type: config.TypeString,
		Help: "the service name on the process's spans; unset, the process's name (api, completer...)"},
	config.Setting{Name: SamplerSetting, Type: config.TypeString,
		Help: "which traces are kept: always_on, always_off, traceidratio, or parentbased_ with one of them (a caller's decision wins)"},
	config.Setting{Name: SamplerArgSetting, Type: config.TypeFraction, Zero: "no new trace is sampled",
		Help: "the share of new traces a traceidratio sampler keeps"},
)

// Config says where a process's traces go. The zero Config traces nothing.
type Config struct {
	// Endpoint is the OTLP receiver's URL; empty traces nothing.
	Endpoint string
	// Protocol is grpc or http/protobuf. Defaults to DefaultProtocol.
	Protocol string
	// Service names the process on its spans. Required with Endpoint.
	Service string
	// Sampler is an OTEL_TRACES_SAMPLER name. Defaults to DefaultSampler.
	Sampler string
	// SamplerArg is the share a ratio sampler keeps.
	SamplerArg float64
}

// The rules a protocol and a sampler are held to, where they are read
// (FromEnv) and where they are used (Setup).
const (
	protocolRule = "must be grpc or http/protobuf"
	samplerRule  = "must be always_on, always_off or traceidratio, alone or with parentbased_ before it"
)

// FromEnv reads the tracing settings of the process called name. A
// protocol or a sampler that means nothing is refused whether or not an
// endpoint is set: a value that would break the day tracing is turned on
// is found the day it is written.
func FromEnv(env *config.Env, name string) *Config {
	cfg := &Config{
		Endpoint:   env.String(EndpointSetting, ""),
		Protocol:   env.String(ProtocolSetting, DefaultProtocol),
		Service:    env.String(ServiceSetting, name),
		Sampler:    env.String(SamplerSetting, DefaultSampler),
		SamplerArg: env.FractionOrZero(SamplerArgSetting, DefaultSamplerArg),
	}
	if !knownProtocol(cfg.Protocol) {
		env.Refuse(ProtocolSetting, protocolRule)
	}
	if _, err := newSampler(cfg.Sampler, cfg.SamplerArg); err != nil {
		env.Refuse(SamplerSetting, samplerRule)
	}
	return cfg
}

// knownProtocol reports whether protocol is one Setup exports with (its
// switch); "" is the default, grpc.
func knownProtocol(protocol string) bool {
	return protocol == "" || protocol == "grpc" || protocol == "http/protobuf"
}

// Setup installs the global tracer provider that cfg describes and the
// W3C trace-context propagator, and returns what flushes and stops it. With
// no endpoint it installs nothing and stop does nothing.
func Setup(ctx context.Context, cfg *Config) (stop func(context.Context) error, err error) {
	if cfg == nil || cfg.Endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	sampler, err := newSampler(cfg.Sampler, cfg.SamplerArg)
	if err != nil {
		return nil, err
	}
	var exporter sdktrace.SpanExporter
	switch cfg.Protocol {
	case "", "grpc":
		exporter, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
	case "http/protobuf":
		// The endpoint is the receiver's base URL, as the OTLP spec has
		// it: traces go to its /v1/traces.
		exporter, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(strings.TrimSuffix(cfg.Endpoint, "/")+"/v1/traces"))
	default:
		return nil, fmt.Errorf("%s=%s: %s", ProtocolSetting, cfg.Protocol, protocolRule)
	}
	if err != nil {
		return nil, fmt.Errorf("trace exporter for %s: %w", cfg.Endpoint, err)
	}
	provider := NewProvider(cfg.Service, sampler, sdktrace.WithBatcher(exporter))
	Install(provider)
	return func(ctx context.Context) error {
		// A process that stops sends what it has left, within a bound:
		// a receiver gone away must not hold up a shutdown.
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return provider.Shutdown(ctx)
	}, nil
}

// NewProvider returns a tracer provider for the service, with sampler and
// opts (an exporter: sdktrace.WithBatcher, or WithSyncer in tests).
func NewProvider(service string, sampler sdktrace.Sampler, opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service))
	return sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{
		sdktrace.WithResource(res), sdktrace.WithSampler(sampler),
	}, opts...)...)
}

// Install makes provider the one every span of the process goes to, and
// turns the instrumentation on (On).
func Install(provider *sdktrace.TracerProvider) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	otel.SetTracerProvider(provider)
	installed.Store(true)
}

// newSampler is the sampler OTEL_TRACES_SAMPLER names, with arg for the
// ratio samplers.
func newSampler(name string, arg float64) (sdktrace.Sampler, error) {
	base, parent := strings.CutPrefix(name, "parentbased_")
	var s sdktrace.Sampler
	switch base {
	case "always_on":
		s = sdktrace.AlwaysSample()
	case "always_off":
		s = sdktrace.NeverSample()
	case "traceidratio":
		s = sdktrace.TraceIDRatioBased(arg)
	default:
		return nil, errors.New(SamplerSetting + "=" + name + ": " + samplerRule)
	}
	if parent {
		s = sdktrace.ParentBased(s)
	}
	return s, nil
}
