package clientcheck_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/proof/clientcheck"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// rideApp is a program of another module that imports the client
// package, as an app would: it creates one ride against $RIDES_URL with
// $RIDES_TOKEN and prints what it got as JSON.
const rideApp = `package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/rocketrides/rocketrides/client"
)

func main() {
	c, err := client.New(&client.Config{URL: os.Getenv("RIDES_URL"), Token: os.Getenv("RIDES_TOKEN")})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ride, err := c.CreateRide(ctx, client.RideParams{OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712})
	out := map[string]any{}
	var prob *client.Error
	switch {
	case err == nil:
		out["id"], out["status"] = ride.ID, ride.Status
	case errors.As(err, &prob):
		out["code"], out["final"] = prob.Code, prob.Final
	default:
		out["error"] = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	if err != nil {
		os.Exit(1)
	}
}
`

// buildRideApp builds rideApp in a module of its own in a temporary
// directory, whose go.mod requires the client package from this
// checkout (a replace directive), and returns the binary. The client
// module requires nothing, so the build needs no network and no go.sum.
func buildRideApp(t *testing.T) string {
	t.Helper()
	clientDir, err := filepath.Abs(filepath.Join("..", "..", "..", "client"))
	require.NoError(t, err)
	dir := t.TempDir()
	gomod := "module example.com/rideapp\n\ngo 1.22\n\n" +
		"require github.com/rocketrides/rocketrides/client v0.0.0\n\n" +
		"replace github.com/rocketrides/rocketrides/client => " + clientDir + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(rideApp), 0o644))
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

func runRideApp(t *testing.T, bin, url, token string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "RIDES_URL="+url, "RIDES_TOKEN="+token)
	out, _ := cmd.Output() // exit status 1 on an error answer: the JSON says which
	var got map[string]any
	require.NoError(t, json.Unmarshal(out, &got), "the program printed %q", out)
	return got
}

// TestProgramOutsideTheModule builds a program of its own module that
// imports the client package, has it create a ride against a running api,
// and then runs it against the harness, once per case, as cmd/clientcheck
// -client runs any client.
func TestProgramOutsideTheModule(t *testing.T) {
	t.Parallel()
	bin := buildRideApp(t)

	t.Run("CreatesARideAgainstTheAPI", func(t *testing.T) {
		t.Parallel()
		b := apitest.New(t, apitest.Options{})
		got := runRideApp(t, bin, b.URL, b.Token)
		require.Equal(t, "succeeded", got["status"], "%v", got)
		id, ok := got["id"].(float64)
		require.True(t, ok, "%v", got)

		ride := b.Do(t, http.MethodGet, "/rides/"+strconv.FormatInt(int64(id), 10), "", "Authorization", "Bearer "+b.Token)
		require.Equal(t, http.StatusOK, ride.Status, "%s", ride.Body)
		require.Equal(t, "succeeded", ride.JSON(t)["status"])
		require.Equal(t, 1, b.Stripe.Stats().Charges)
	})

	t.Run("PassesTheHarness", func(t *testing.T) {
		t.Parallel()
		h, base := harness(t)
		for _, name := range clientcheck.Names() {
			got := runRideApp(t, bin, caseURL(t, base, name), "rr_clientcheck_token")
			require.NotContains(t, got, "error", "%s: %v", name, got)
		}
		report := h.Report()
		require.True(t, report.Passed(), "%s", report)
		require.True(t, strings.Contains(report.String(), "pass"))
	})
}
