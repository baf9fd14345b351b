// Command rideapp is the smallest app on the client package, and the Go
// client's command for clientcheck (docs/clients.md, "The command's
// contract"): on start it resumes every ride pending in the journal at
// $RIDES_JOURNAL, and only if none was pending does it request one new
// ride, against $RIDES_URL with $RIDES_TOKEN. It prints what became of
// each ride as a line of JSON, and exits 1 if any ended in an error.
//
// Without RIDES_JOURNAL it keeps no journal: a ride lives in memory only,
// and a restart after the app's death requests a second one.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/rocketrides/rocketrides/client"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "rideapp:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := &client.Config{URL: os.Getenv("RIDES_URL"), Token: os.Getenv("RIDES_TOKEN")}
	if path := os.Getenv("RIDES_JOURNAL"); path != "" {
		j, err := client.NewFileJournal(path)
		if err != nil {
			return err
		}
		cfg.Journal = j
	}
	c, err := client.New(cfg)
	if err != nil {
		return err
	}
	pending, err := c.PendingRides()
	if err != nil {
		return err
	}
	var failed error
	for _, r := range pending {
		ride, err := withDeadline(func(ctx context.Context) (*client.Ride, error) { return c.ResumeRide(ctx, r) })
		failed = errors.Join(failed, report(r.IdempotencyKey, true, ride, err))
	}
	if len(pending) > 0 {
		return failed
	}
	key := client.NewKey()
	ride, err := withDeadline(func(ctx context.Context) (*client.Ride, error) {
		return c.CreateRide(ctx, client.RideParams{
			OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712,
			IdempotencyKey: key,
		})
	})
	return report(key, false, ride, err)
}

// withDeadline bounds one ride's tries to a minute.
func withDeadline(send func(context.Context) (*client.Ride, error)) (*client.Ride, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return send(ctx)
}

// report prints what became of the ride with key, and returns err.
func report(key string, resumed bool, ride *client.Ride, err error) error {
	out := map[string]any{"key": key, "resumed": resumed}
	var prob *client.Error
	switch {
	case ride != nil:
		out["id"], out["status"] = ride.ID, ride.Status
	case errors.As(err, &prob):
		out["code"], out["final"] = prob.Code, prob.Final
	}
	if err != nil {
		out["error"] = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	return err
}
