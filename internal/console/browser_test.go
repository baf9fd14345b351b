package console_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/platform/project"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// chromium is Debian's chromium, which .ci/run installs where missing.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Fatal("no chromium on PATH: install Debian's chromium package (.ci/run does)")
	return ""
}

// browser starts a headless chromium with a fresh profile for t.
func browser(t *testing.T) context.Context {
	t.Helper()
	// A fresh profile; removed once the browser has gone (chromium may
	// still be writing to it as t.TempDir's cleanup would run).
	profile, err := os.MkdirTemp("", "console-browser-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(profile) })
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 40*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}

// screenshot saves the page under .data/console-screenshots/name.png, for
// a reviewer to look at.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var png []byte
	require.NoError(t, chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)))
	root, err := project.Root()
	require.NoError(t, err)
	dir := filepath.Join(root, ".data", "console-screenshots")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

func loginInBrowser(t *testing.T, ctx context.Context, b *testBundle) {
	t.Helper()
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(b.console.URL+"/"),
		chromedp.WaitVisible(`#login`),
		chromedp.SendKeys(`input[name=operator]`, "ada"),
		chromedp.SendKeys(`input[name=password]`, password),
	))
	screenshot(t, ctx, "login")
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Submit(`#login`),
		chromedp.WaitVisible(`#operator`),
	))
}

func TestBrowser(t *testing.T) {
	t.Parallel()

	// Log in, watch the overview count a ride made after the page loaded,
	// and follow the ride's story.
	t.Run("OverviewCountsARideLive", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := browser(t)
		loginInBrowser(t, ctx, b)
		require.NoError(t, chromedp.Run(ctx,
			chromedp.WaitVisible(`.live`), // the event stream is connected
			chromedp.WaitVisible(`[data-field="rides.succeeded"]`),
		))
		var before string
		require.NoError(t, chromedp.Run(ctx, chromedp.Text(`[data-field="rides.succeeded"]`, &before)))
		require.Equal(t, "0", before)

		key := apitest.NewKey()
		require.Equal(t, http.StatusCreated, b.PostRide(t, key, apitest.DefaultParams).Status)
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Poll(`document.querySelector('[data-field="rides.succeeded"]').textContent === "1"`, nil,
				chromedp.WithPollingTimeout(10*time.Second)),
		))
		screenshot(t, ctx, "overview")

		var point string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.SendKeys(`header input[name=q]`, key),
			chromedp.Submit(`header form.search`),
			chromedp.WaitVisible(`#steps`),
			chromedp.Text(`#recovery-point`, &point),
		))
		require.Equal(t, "finished", point)
		var charges int
		require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('tr.charge').length`, &charges)))
		require.Equal(t, 1, charges, "exactly one charge at Stripe")
		screenshot(t, ctx, "story")
	})

	// Flag a key through the unknown-outcome path and settle it with each
	// of the three actions, from the attention page and the story page.
	t.Run("SettlesKeysSetAside", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, closed := b.flag(t)
		_, released := b.flag(t)
		_, adopted := b.flag(t)
		chargeID := chargeFor(t, b, adopted)

		ctx := browser(t)
		loginInBrowser(t, ctx, b)
		id := func(n int64) string { return strconv.FormatInt(n, 10) }
		var msg string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(b.console.URL+"/attention"),
			chromedp.WaitVisible(`#key-`+id(adopted)),
		))
		screenshot(t, ctx, "attention")
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click(`#key-`+id(closed)+` button.close`),
			chromedp.WaitVisible(`#message`),
			chromedp.Text(`#message`, &msg),
		))
		require.Contains(t, msg, "Closed as failed")
		require.Equal(t, "failed", b.rideStatus(t, closed))

		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click(`#key-`+id(released)+` button.release`),
			// Released, the key is no longer set aside: its card goes.
			chromedp.WaitNotPresent(`#key-`+id(released)),
			chromedp.Text(`#message`, &msg),
		))
		require.Contains(t, msg, "Released")
		require.Equal(t, "pending", b.rideStatus(t, released))

		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(b.console.URL+"/keys/"+id(adopted)),
			chromedp.WaitVisible(`#adopt`),
			chromedp.Click(`#adopt`),
			chromedp.WaitVisible(`#message`),
			chromedp.Text(`#message`, &msg),
		))
		require.Contains(t, msg, chargeID)
		require.Equal(t, "succeeded", b.rideStatus(t, adopted))
		require.Len(t, b.ChargesFor(adopted), 1, "the charge was adopted, not made again")
		screenshot(t, ctx, "settled")

		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(b.console.URL+"/abandoned"),
			chromedp.WaitVisible(`main h1`),
		))
		screenshot(t, ctx, "abandoned")
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(b.console.URL+"/reconciliation"),
			chromedp.WaitVisible(`#never`),
		))
		screenshot(t, ctx, "reconciliation")
	})
}
