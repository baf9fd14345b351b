package clientcheck_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/client"
	"github.com/rocketrides/rocketrides/internal/proof/clientcheck"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// rideAppSource is the Go client's command (docs/clients.md, "The
// command's contract"), which the tests build as a program of another
// module, as an app would be.
var rideAppSource = filepath.Join("..", "..", "..", "client", "cmd", "rideapp", "main.go")

// buildRideApp builds the client's command in a module of its own in a
// temporary directory, whose go.mod requires the client package from
// this checkout (a replace directive), and returns the binary. The client
// module requires nothing, so the build needs no network and no go.sum.
func buildRideApp(t *testing.T) string {
	t.Helper()
	clientDir, err := filepath.Abs(filepath.Join("..", "..", "..", "client"))
	require.NoError(t, err)
	src, err := os.ReadFile(rideAppSource)
	require.NoError(t, err)
	dir := t.TempDir()
	gomod := "module example.com/rideapp\n\ngo 1.22\n\n" +
		"require github.com/rocketrides/rocketrides/client v0.0.0\n\n" +
		"replace github.com/rocketrides/rocketrides/client => " + clientDir + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644))
	bin := filepath.Join(dir, "rideapp")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build a program outside the module:\n%s", out)
	return bin
}

// runRideApp runs the program once against url with journal, and
// returns the rides it printed.
func runRideApp(t *testing.T, bin, url, token, journal string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "RIDES_URL="+url, "RIDES_TOKEN="+token, "RIDES_JOURNAL="+journal)
	out, _ := cmd.Output() // exit status 1 on an error answer: the JSON says which
	var rides []map[string]any
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var ride map[string]any
		require.NoError(t, dec.Decode(&ride), "the program printed %q", out)
		rides = append(rides, ride)
	}
	require.NotEmpty(t, rides, "the program printed nothing")
	return rides
}

// TestProgramOutsideTheModule builds the client's command as a program
// of its own module that imports the client package, and has it create
// and resume rides against a running api.
func TestProgramOutsideTheModule(t *testing.T) {
	t.Parallel()
	bin := buildRideApp(t)

	t.Run("CreatesARideAgainstTheAPI", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{})
		journal := filepath.Join(t.TempDir(), "rides-journal")
		got := runRideApp(t, bin, b.URL, b.Token, journal)
		require.Len(t, got, 1)
		require.Equal(t, "succeeded", got[0]["status"], "%v", got)
		require.Equal(t, false, got[0]["resumed"])
		id, ok := got[0]["id"].(float64)
		require.True(t, ok, "%v", got)

		ride := b.Do(t, http.MethodGet, "/rides/"+strconv.FormatInt(int64(id), 10), "", "Authorization", "Bearer "+b.Token)
		require.Equal(t, http.StatusOK, ride.Status, "%s", ride.Body)
		require.Equal(t, "succeeded", ride.JSON(t)["status"])
		require.Equal(t, 1, b.Stripe.Stats().Charges)
		requirePending(t, journal, 0)
	})

	// The app died after its first try had charged the rider, its answer
	// lost: started again, it resumes the ride from its journal and gets
	// the stored 201. One ride, one charge.
	t.Run("ResumesAKilledRideAgainstTheAPI", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{})
		journal := filepath.Join(t.TempDir(), "rides-journal")
		j, err := client.NewFileJournal(journal)
		require.NoError(t, err)
		pending := client.PendingRide{
			IdempotencyKey: client.NewKey(), Recorded: time.Now(),
			Body: "origin_lat=37.7749&origin_lon=-122.4194&target_lat=37.8044&target_lon=-122.2712",
		}
		require.NoError(t, j.Add(pending))
		first := b.Do(t, http.MethodPost, "/rides", pending.Body, "Authorization", "Bearer "+b.Token,
			"Idempotency-Key", pending.IdempotencyKey, "Content-Type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)

		got := runRideApp(t, bin, b.URL, b.Token, journal)
		require.Len(t, got, 1, "the restart resumes the pending ride and creates none: %v", got)
		require.Equal(t, true, got[0]["resumed"])
		require.Equal(t, pending.IdempotencyKey, got[0]["key"])
		require.Equal(t, first.JSON(t)["id"], got[0]["id"])
		require.Equal(t, 1, b.Stripe.Stats().Charges)
		requirePending(t, journal, 0)
	})
}

func requirePending(t *testing.T, journal string, n int) {
	t.Helper()
	j, err := client.NewFileJournal(journal)
	require.NoError(t, err)
	pending, err := j.Pending()
	require.NoError(t, err)
	require.Len(t, pending, n, "%v", pending)
}

// TestProjectClients runs each of the project's clients against every
// case, the death cases included: each must pass them all. The Go client
// with its journal turned off passes the rest and fails every death case,
// on the rules of the app's death, as any client without a journal does.
func TestProjectClients(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	for _, p := range clientcheck.ProjectClients {
		t.Run(p.Name, func(t *testing.T) {
			t.Parallel()
			c, err := p.Prepare(context.Background(), root, t.TempDir())
			require.NoError(t, err)
			report := runClient(t, c)
			t.Logf("the %s client against the harness:\n%s", p.Name, report)
			require.True(t, report.Passed(), "%s", report)
		})
	}

	t.Run("GoWithoutAJournal", func(t *testing.T) {
		t.Parallel()
		c, err := clientcheck.ProjectClients[0].Prepare(context.Background(), root, t.TempDir())
		require.NoError(t, err)
		c.Command = "env -u RIDES_JOURNAL " + c.Command
		report := runClient(t, c)
		t.Logf("the Go client without its journal:\n%s", report)
		for _, res := range report.Results {
			if !res.Case.Dies() {
				require.True(t, res.Passed(), "%s: %v", res.Case.Name, res.Failed())
				continue
			}
			require.False(t, res.Passed(), "%s passed a client without a journal", res.Case.Name)
			require.Subset(t, res.Failed(), []string{clientcheck.RuleResumed, clientcheck.RuleOnce}, res.Case.Name)
		}
	})
}

func runClient(t *testing.T, c clientcheck.Client) clientcheck.Report {
	t.Helper()
	h, base := harness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	report, err := h.Run(ctx, base, c)
	require.NoError(t, err)
	return report
}
