package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HTTP counts the API's requests and times them, by route pattern.
type HTTP struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewHTTP registers the HTTP metrics on reg.
func NewHTTP(reg prometheus.Registerer) *HTTP {
	m := &HTTP{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "http_requests_total",
			Help:      "HTTP requests served, by method, route pattern and status code.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "http_request_duration_seconds",
			Help:      "Time to serve an HTTP request, by method and route pattern.",
			// POST /rides waits on Stripe, whose calls time out at 20s by
			// default and are retried by stripe-go.
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"method", "route"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// UnmatchedRoute is the route label of a request that matched no route.
const UnmatchedRoute = "unmatched"

// Observe records one request. route is the router's pattern
// ("/rides/{id}"), never the raw path; "" means no route matched.
func (m *HTTP) Observe(method, route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	if route == "" {
		route = UnmatchedRoute
	}
	method = methodLabel(method)
	m.requests.WithLabelValues(method, route, statusLabel(status)).Inc()
	m.duration.WithLabelValues(method, route).Observe(d.Seconds())
}

// methodLabel keeps the methods the API knows and folds the rest, which a
// client can make up at will, into one value.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return method
	}
	return "other"
}

// statusLabels are the status codes as label values, built once so that
// counting a request allocates no string.
var statusLabels = func() []string {
	s := make([]string, 600)
	for code := range s {
		s[code] = strconv.Itoa(code)
	}
	return s
}()

func statusLabel(code int) string {
	if code < 0 || code >= len(statusLabels) {
		return "other"
	}
	return statusLabels[code]
}
