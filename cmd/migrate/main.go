// Command migrate applies the database schema (the project's migrations,
// then River's) to DATABASE_URL: migrate up | down | version.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/rocketrides/rocketrides/internal/platform/config"
	"github.com/rocketrides/rocketrides/internal/platform/db"
)

const usage = "usage: migrate up|down|version  (DATABASE_URL names the database)"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 1 {
		return errors.New(usage)
	}
	var env config.Env
	logger, err := config.Logger(&env, "migrate", os.Stderr)
	if err != nil {
		return err
	}
	url := env.Required("DATABASE_URL")
	if err := env.Err(); err != nil {
		return err
	}
	ctx := context.Background()
	switch args[0] {
	case "up":
		if err := db.MigrateUp(ctx, url, logger); err != nil {
			return err
		}
	case "down":
		if err := db.MigrateDown(ctx, url, logger); err != nil {
			return err
		}
	case "version":
	default:
		return errors.New(usage)
	}
	version, dirty, river, err := db.Version(ctx, url, logger)
	if err != nil {
		return err
	}
	fmt.Printf("schema=%d dirty=%t river=%v\n", version, dirty, river)
	return nil
}
