// Package netfault puts a fault proxy on the wire between two of the
// project's processes: Toxiproxy, run in the test's (or the chaos tool's)
// own process. A Link listens on a loopback port and forwards every
// connection to its upstream, Postgres or the Stripe fake, say; the
// process under test is given the Link's address instead of the
// upstream's. Faults are then added to and removed from the running link:
// resets, blackholes, latency, a thin pipe, sliced packets.
//
// Nothing is mocked: the bytes are the real protocol's, on real sockets,
// between real processes. Only the network between them misbehaves.
package netfault

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxies holds the links of one test or one chaos run.
type Proxies struct {
	server *toxiproxy.ApiServer

	mu    sync.Mutex
	links []*Link
}

// New returns an empty set of links. It silences zerolog's global
// logger, which some of Toxiproxy's faults write every interrupted write
// to, at trace level, on stderr: thousands of lines that would bury a
// test's or the soak's own output. Nothing of the project logs through
// zerolog.
func New() *Proxies {
	zerolog.SetGlobalLevel(zerolog.Disabled)
	metrics := toxiproxy.NewMetricsContainer(prometheus.NewRegistry())
	return &Proxies{server: toxiproxy.NewServer(metrics, zerolog.Nop())}
}

// Link starts a proxy named name on a free loopback port, forwarding to
// upstream (host:port).
func (ps *Proxies) Link(name, upstream string) (*Link, error) {
	p := toxiproxy.NewProxy(ps.server, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("netfault: start link %s to %s: %w", name, upstream, err)
	}
	l := &Link{proxy: p}
	ps.mu.Lock()
	ps.links = append(ps.links, l)
	ps.mu.Unlock()
	return l, nil
}

// Close stops every link, closing their connections.
func (ps *Proxies) Close() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, l := range ps.links {
		l.proxy.Stop()
	}
	ps.links = nil
}

// Link is one proxied route: a listening address whose connections reach
// the upstream through the faults currently added.
type Link struct {
	proxy *toxiproxy.Proxy
}

// Name is the link's name, as given to Proxies.Link.
func (l *Link) Name() string { return l.proxy.Name }

// Addr is the host:port to give the process under test.
func (l *Link) Addr() string { return l.proxy.Listen }

// URL is rawURL (a postgres:// or http:// URL of the upstream) with its
// host and port replaced by the link's, so that whoever uses it goes
// through the link.
func (l *Link) URL(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("netfault: %w", err)
	}
	u.Host = l.Addr()
	return u.String(), nil
}

// Add puts fault on the link, for the connections open now and those to
// come, until Remove or Clear. Faults with the same Name replace nothing:
// adding a name twice is an error.
func (l *Link) Add(fault Fault) error {
	body, err := json.Marshal(fault.toxic())
	if err != nil {
		return fmt.Errorf("netfault: %w", err)
	}
	if _, err := l.proxy.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		return fmt.Errorf("netfault: add %s to %s: %w", fault.Name, l.Name(), err)
	}
	return nil
}

// Remove takes the fault named name off the link. A blackhole's
// connections are closed as it goes: what they held is lost.
func (l *Link) Remove(name string) error {
	if err := l.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
		return fmt.Errorf("netfault: remove %s from %s: %w", name, l.Name(), err)
	}
	return nil
}

// Clear takes every fault off the link.
func (l *Link) Clear() { l.proxy.Toxics.ResetToxics(context.Background()) }

// Cut closes every connection open on the link at once, as a router that
// drops its state does, and then accepts new ones again.
func (l *Link) Cut() error {
	l.proxy.Stop()
	if err := l.proxy.Start(); err != nil {
		return fmt.Errorf("netfault: reopen %s: %w", l.Name(), err)
	}
	return nil
}

// Stream is the direction a fault acts on.
type Stream string

const (
	// Upstream is what the process under test sends: its queries, its
	// Stripe requests.
	Upstream Stream = "upstream"
	// Downstream is what comes back: results, answers.
	Downstream Stream = "downstream"
)

// Fault is one Toxiproxy toxic on one direction of a link.
type Fault struct {
	// Name identifies the fault on its link, for Remove.
	Name   string
	Kind   string // Toxiproxy's type: reset_peer, timeout, latency, bandwidth, slicer
	Stream Stream
	// Attributes are the toxic's own, in its units (milliseconds, KB/s,
	// bytes).
	Attributes map[string]any
}

func (f Fault) toxic() map[string]any {
	return map[string]any{
		"name": f.Name, "type": f.Kind, "stream": string(f.Stream),
		"toxicity": 1.0, "attributes": f.Attributes,
	}
}

func (f Fault) String() string {
	return fmt.Sprintf("%s %s %v", f.Kind, f.Stream, f.Attributes)
}

// Reset resets (TCP RST) each connection on the next data in stream, as
// a peer or a middlebox that crashed does.
func Reset(name string, stream Stream) Fault {
	return Fault{Name: name, Kind: "reset_peer", Stream: stream, Attributes: map[string]any{"timeout": 0}}
}

// Blackhole drops every byte in stream and never closes the connection:
// the half-open link of a dead peer, or a partition. Nothing resets it
// until the fault is removed, which closes the connections it held.
func Blackhole(name string, stream Stream) Fault {
	return Fault{Name: name, Kind: "timeout", Stream: stream, Attributes: map[string]any{"timeout": 0}}
}

// Latency delays each chunk in stream by latency, give or take jitter.
func Latency(name string, stream Stream, latency, jitter time.Duration) Fault {
	return Fault{Name: name, Kind: "latency", Stream: stream,
		Attributes: map[string]any{"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds()}}
}

// Bandwidth limits stream to kbps kilobytes a second.
func Bandwidth(name string, stream Stream, kbps int) Fault {
	return Fault{Name: name, Kind: "bandwidth", Stream: stream, Attributes: map[string]any{"rate": kbps}}
}

// Slice cuts stream into pieces of about size bytes, each delay apart:
// a protocol's messages arrive split at arbitrary points.
func Slice(name string, stream Stream, size int, delay time.Duration) Fault {
	return Fault{Name: name, Kind: "slicer", Stream: stream,
		Attributes: map[string]any{"average_size": size, "size_variation": size / 2, "delay": delay.Microseconds()}}
}

// CommitAnswer is what Postgres sends when a COMMIT has committed: the
// CommandComplete message tagged COMMIT. Given to BlackholeFrom on the
// downstream of a link to Postgres, the transaction commits and its
// client never hears so.
var CommitAnswer = []byte("C\x00\x00\x00\x0bCOMMIT\x00")

// BlackholeFrom is a Blackhole that opens at the first chunk of stream
// holding marker: what comes before it passes, that chunk and everything
// after it on the connection are dropped.
func BlackholeFrom(name string, stream Stream, marker []byte) Fault {
	return Fault{Name: name, Kind: blackholeFromKind, Stream: stream, Attributes: map[string]any{"marker": marker}}
}

const blackholeFromKind = "blackhole_from"

func init() { toxics.Register(blackholeFromKind, new(blackholeFrom)) }

// blackholeFrom is BlackholeFrom's toxic. Its state, per connection,
// says whether the marker has gone by.
type blackholeFrom struct {
	Marker []byte `json:"marker"`
}

func (t *blackholeFrom) NewState() any { return new(bool) }

func (t *blackholeFrom) Pipe(stub *toxics.ToxicStub) {
	dark := stub.State.(*bool)
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			*dark = *dark || bytes.Contains(c.Data, t.Marker)
			if !*dark {
				stub.Output <- c
			}
		}
	}
}
