package trace

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/config"
)

func TestSetup(t *testing.T) {
	t.Parallel()

	t.Run("TracesNothingWithoutAnEndpoint", func(t *testing.T) {
		t.Parallel()
		stop, err := Setup(context.Background(), &Config{Sampler: "nonsense"})
		require.NoError(t, err)
		require.False(t, On(), "no endpoint installs no instrumentation")
		require.NoError(t, stop(context.Background()))
	})

	t.Run("RefusesAnUnknownSamplerNamingIt", func(t *testing.T) {
		t.Parallel()
		_, err := Setup(context.Background(), &Config{Endpoint: "http://127.0.0.1:1", Sampler: "sometimes"})
		require.ErrorContains(t, err, SamplerSetting+"=sometimes")
	})

	t.Run("RefusesAnUnknownProtocolNamingIt", func(t *testing.T) {
		t.Parallel()
		_, err := Setup(context.Background(), &Config{Endpoint: "http://127.0.0.1:1", Sampler: DefaultSampler, Protocol: "http/json"})
		require.ErrorContains(t, err, ProtocolSetting+"=http/json")
	})

	t.Run("StandardVariablesAreNoUnknownSettings", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, config.Unknown([]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_HEADERS=a=b",
			"OTEL_RESOURCE_ATTRIBUTES=deployment.environment=dev", "OTEL_TRACES_SAMPLER=always_on",
		}))
	})
}

// TestFromEnv: a protocol or a sampler that means nothing is refused by
// name where it is read, with no endpoint set as much as with one.
func TestFromEnv(t *testing.T) {
	t.Setenv(ProtocolSetting, "http/json")
	t.Setenv(SamplerSetting, "sometimes")
	var env config.Env
	cfg := FromEnv(&env, "api")
	require.Empty(t, cfg.Endpoint)
	require.ErrorContains(t, env.Err(), ProtocolSetting+"=http/json: "+protocolRule)
	require.ErrorContains(t, env.Err(), SamplerSetting+"=sometimes: "+samplerRule)

	t.Setenv(ProtocolSetting, "http/protobuf")
	t.Setenv(SamplerSetting, "parentbased_always_on")
	env = config.Env{}
	FromEnv(&env, "api")
	require.NoError(t, env.Err())
}

func TestNewSampler(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"always_on":                "AlwaysOnSampler",
		"traceidratio":             "TraceIDRatioBased{0.25}",
		"parentbased_always_off":   "ParentBased{root:AlwaysOffSampler",
		"parentbased_traceidratio": "ParentBased{root:TraceIDRatioBased{0.25}",
	} {
		s, err := newSampler(name, 0.25)
		require.NoError(t, err, name)
		require.Contains(t, s.Description(), want, name)
	}
}

func TestTraceID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736",
		TraceID("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	for _, bad := range []string{"", "not a traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		require.Empty(t, TraceID(bad), "%q", bad)
	}
}
