// Command chaos runs the soak (internal/proof/chaos): every Rocket Rides process
// against a scratch Postgres cluster and the Stripe fake, a fleet of
// retrying clients, and for -duration SIGKILLs, Postgres restarts and
// Stripe faults; then the drain and the invariant check. With -network,
// every process reaches Postgres and the Stripe fake through a fault
// proxy of its own, and a network nemesis resets, blackholes, slows,
// throttles and slices those links at random (make chaos passes it). It
// prints the summary, with the faults injected by kind and by link, and
// exits 1 if any promise was broken, 2 if the soak could not run.
//
//	go run ./cmd/chaos -duration 60s
//	go run ./cmd/chaos -network                      # and faults on every wire
//	go run ./cmd/chaos -failover -drill leader       # the failover drill on Patroni
//	go run ./cmd/chaos -failover -drill standby      # standby loss and return
//	go run ./cmd/chaos -failover -drill agent        # the leader's Patroni dies, its Postgres lives
//	go run ./cmd/chaos -failover -drill standby -replication strict   # writes wait for the standby
//	go run ./cmd/chaos -pooler                       # through PgBouncer
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rocketrides/rocketrides/internal/dev/localpg"
	"github.com/rocketrides/rocketrides/internal/proof/chaos"
)

func main() { os.Exit(run()) }

func run() int {
	duration := flag.Duration("duration", 60*time.Second, "how long the chaos lasts, before the drain")
	clients := flag.Int("clients", 16, "clients posting rides at once")
	seed := flag.Int64("seed", 0, "seed of the random choices (0: random)")
	keep := flag.Bool("keep", false, "keep the scratch cluster running, and the logs, for inspection")
	failover := flag.Bool("failover", false, "run against a Patroni cluster (etcd and two nodes), and run -drill instead of restarting Postgres")
	drill := flag.String("drill", "leader", "with -failover: leader (the leader dies), standby (the standby dies and returns) or agent (the leader's Patroni dies, its Postgres lives)")
	kills := flag.Int("kills", 3, "with -failover: the drill's rounds; the chaos lasts until they are done")
	replication := flag.String("replication", "sync", "with -failover: the standby's replication: strict or relaxed synchronous mode (Patroni's synchronous_mode_strict on or off), "+
		"async, or sync: the drill's synchronous mode, strict for -drill agent (the project's cluster's), relaxed for leader and standby")
	pooler := flag.Bool("pooler", false, "put PgBouncer (transaction mode) between Postgres and the api instances and completers")
	network := flag.Bool("network", false, "put a fault proxy on every process's links to Postgres and the Stripe fake, and reset, blackhole, slow, throttle and slice them at random")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := checkFlags(set, *duration, *clients, *failover, *pooler, *network, *replication, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	if err := checkDrillFlags(set, *failover, *kills); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}

	// Ctrl-C stops the soak and tears everything down.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	summary, err := chaos.Run(ctx, chaos.Config{
		Duration: *duration,
		Clients:  *clients,
		Seed:     *seed,
		Keep:     *keep,
		Progress: os.Stderr,

		Failover:    *failover,
		Drill:       drillIf(*failover, *drill),
		Kills:       killsIf(*failover, *kills),
		Replication: replicationIf(*failover, *replication),
		Pooler:      *pooler,
		Network:     *network,
	})
	fmt.Print(summary)
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	case !summary.OK():
		return 1
	}
	return 0
}

// checkFlags refuses a command line whose flags contradict each other,
// or ask for a soak of no length or no clients, before anything starts;
// set holds the flags given. -replication sync is refused without
// -failover too: it says something only the drill can honour.
func checkFlags(set map[string]bool, duration time.Duration, clients int, failover, pooler, network bool, replication string, args []string) error {
	switch {
	case len(args) > 0:
		return fmt.Errorf("unexpected arguments %q", args)
	case duration <= 0:
		return fmt.Errorf("-duration %s: want a positive duration", duration)
	case clients <= 0:
		return fmt.Errorf("-clients %d: want at least one client", clients)
	case !slices.Contains(replications, replication):
		return fmt.Errorf("-replication %q: want %s", replication, strings.Join(replications, ", "))
	case set["replication"] && !failover:
		return fmt.Errorf("-replication %s needs -failover: only the failover drill runs a standby", replication)
	case pooler && failover:
		// PgBouncer 1.18 takes one host per database: following a
		// failover would mean rewriting its configuration.
		return errors.New("-pooler and -failover do not go together: the pooler fronts one host, the drill fails over to another")
	case network && failover:
		// A link forwards to one host; the drill's URL names two.
		return errors.New("-network and -failover do not go together: a link forwards to one host, the drill fails over to another")
	}
	return nil
}

// checkDrillFlags refuses -drill and -kills without -failover, and a
// drill of no rounds. -drill's value is checked by chaos.Run, by name.
func checkDrillFlags(set map[string]bool, failover bool, kills int) error {
	switch {
	case (set["drill"] || set["kills"]) && !failover:
		return errors.New("-drill and -kills need -failover: only the failover drill runs a Patroni cluster")
	case kills <= 0:
		return fmt.Errorf("-kills %d: want at least one round", kills)
	}
	return nil
}

// replications are -replication's values.
var replications = []string{"sync", string(localpg.HAStrict), string(localpg.HARelaxed), string(localpg.HAAsync)}

// replicationIf is the Config's Replication for -replication: sync is
// the drill's own synchronous mode, chosen by chaos.Run.
func replicationIf(failover bool, replication string) localpg.HAMode {
	if !failover || replication == "sync" {
		return ""
	}
	return localpg.HAMode(replication)
}

func drillIf(failover bool, drill string) string {
	if !failover {
		return ""
	}
	return drill
}

func killsIf(failover bool, kills int) int {
	if !failover {
		return 0
	}
	return kills
}
