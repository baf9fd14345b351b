package chaos

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/rocketrides/rocketrides/internal/testkit/netfault"
)

// The network nemesis (Config.Network). Every process reaches Postgres
// (or PgBouncer) and the Stripe fake through a link of its own, a fault
// proxy (package netfault): each api instance and each completer to the
// database and to Stripe, each enqueuer and the worker to the database.
// At random moments the nemesis puts a fault on a random link, in a
// random direction, and takes it off a while later, so that faults on
// different links overlap, while the process faults go on as ever:
//
//   - reset_peer: every connection on the link is reset (TCP RST) at its
//     next byte. Downstream, the answer to whatever was sent is lost: a
//     COMMIT that was applied, or a charge Stripe made.
//   - timeout: the link is a black hole for seconds. Nothing is reset;
//     whoever waits on it waits until its own deadline, or until the
//     hole closes, which closes the connections it held.
//   - latency: each chunk is delayed, with jitter, while keys are locked.
//   - bandwidth: a thin pipe, a few kilobytes a second.
//   - slicer: the protocol's messages arrive cut into small pieces.
//
// What the processes are owed is nothing more than the soak's promise:
// one charge per ride, no charge without a ride, every acknowledged ride
// kept, every key finished once the faults stop.

// The kinds of network fault, Toxiproxy's names for them, in the order
// the summary lists them.
const (
	NetReset     = "reset_peer"
	NetBlackhole = "timeout"
	NetLatency   = "latency"
	NetBandwidth = "bandwidth"
	NetSlicer    = "slicer"
)

// networkFaultKinds are the kinds the nemesis injects.
var networkFaultKinds = []string{NetReset, NetBlackhole, NetLatency, NetBandwidth, NetSlicer}

// wire returns the URL process is to reach rawURL (a postgres:// or
// http:// URL of upstream) by: through a link of its own with the
// network nemesis, rawURL itself without.
func (s *soak) wire(process, upstream, rawURL string) (string, error) {
	if s.proxies == nil {
		return rawURL, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("link %s to %s: %w", process, upstream, err)
	}
	link, err := s.proxies.Link(process+"->"+upstream, u.Host)
	if err != nil {
		return "", err
	}
	s.links = append(s.links, link)
	return link.URL(rawURL)
}

// injectNetworkFaults puts a fault on a random link every lo-hi and takes
// it off after a hold of its own; when stop is closed, every fault still
// on is taken off before it returns. The kinds come in shuffled rounds,
// and firstRound is closed once the first is done (or the nemesis is):
// the soak's chaos lasts until then, so that every soak injects each.
func (m *monkey) injectNetworkFaults(ctx context.Context, stop <-chan struct{}, links []*netfault.Link, lo, hi time.Duration, firstRound chan<- struct{}) {
	roundDone := sync.OnceFunc(func() { close(firstRound) })
	defer roundDone()
	var held sync.WaitGroup
	defer held.Wait()
	var round []int
	for n := 1; sleep(ctx, stop, m.between(lo, hi)); n++ {
		if len(round) == 0 {
			round = m.rng.Perm(len(networkFaultKinds))
		}
		kind := networkFaultKinds[round[0]]
		round = round[1:]
		link := links[m.rng.IntN(len(links))]
		fault, hold := m.networkFault(kind, fmt.Sprintf("nemesis-%d", n))
		if err := link.Add(fault); err != nil {
			m.faults.problem("%v", err)
		} else {
			m.faults.count(func(f *faults) { f.network[kind]++; f.networkLinks[link.Name()]++ })
			m.progress("network fault on %s for %s: %s", link.Name(), hold.Round(time.Millisecond), fault)
			held.Go(func() {
				sleep(ctx, stop, hold)
				if err := link.Remove(fault.Name); err != nil {
					m.faults.problem("%v", err)
				}
			})
		}
		if len(round) == 0 {
			roundDone()
		}
	}
}

// networkFault draws a fault of kind, its direction and its strength,
// and how long it stays on.
func (m *monkey) networkFault(kind, name string) (netfault.Fault, time.Duration) {
	stream := netfault.Upstream
	if m.rng.IntN(2) == 0 {
		stream = netfault.Downstream
	}
	hold := m.between(time.Second, 4*time.Second)
	switch kind {
	case NetReset:
		// Every connection dies while it is on, new ones too: a moment.
		return netfault.Reset(name, stream), m.between(100*time.Millisecond, time.Second)
	case NetBlackhole:
		// Longer than the soak's lock timeout, now and then: the key's
		// holder is cut off and a retry takes the key over.
		return netfault.Blackhole(name, stream), m.between(time.Second, 5*time.Second)
	case NetLatency:
		latency := m.between(50*time.Millisecond, 500*time.Millisecond)
		return netfault.Latency(name, stream, latency, latency/2), hold
	case NetBandwidth:
		return netfault.Bandwidth(name, stream, 1+m.rng.IntN(32)), hold
	default:
		return netfault.Slice(name, stream, 4+m.rng.IntN(60), time.Duration(m.rng.IntN(1000))*time.Microsecond), hold
	}
}
