package reaper

import (
	"fmt"

	"github.com/rocketrides/rocketrides/internal/idem"
	"github.com/rocketrides/rocketrides/internal/platform/config"
)

// Variables are the reaper's own; REAPER_MAX_AGE, the key's lifetime
// that the reaper keeps, is idem's (every process that takes keys' locks
// reads it).
var Variables = config.Declare(
	config.Setting{Name: "REAPED_KEY_RETENTION", Type: config.TypeDuration,
		Help:     "how long after a key's first use the record of its deletion refuses its late retries (410); only then may the key's value start a new request",
		Trades:   "shorter frees reaped_keys sooner, but a client retrying after it starts a new request, and a new charge, under the old key; it must exceed REAPER_MAX_AGE",
		Failures: "Residual risks, and who notices (keys older than the reaper's horizon)"},
	config.Setting{Name: "REAPER_BATCH_SIZE", Type: config.TypeInt, Unit: "keys",
		Help: "keys deleted per statement"},
	config.Setting{Name: "REAPER_POLL_INTERVAL", Type: config.TypeDuration,
		Help: "how often the reaper looks for keys past their lifetime when the last look found none"},
	config.Setting{Name: "REAPER_DUTY_CYCLE", Type: config.TypeFraction,
		Help: "the share of time spent deleting while a backlog drains, so that it does not crowd out the api (1: no rest between batches)"},
)

// ConfigFromEnv reads the reaper's settings into a Config, whose Keys,
// Settle and Logger are the caller's. What Config.validate would refuse
// by its fields' names it refuses here by the settings': a
// REAPED_KEY_RETENTION at or below REAPER_MAX_AGE. (The lock timeout
// against REAPER_MAX_AGE is idem.LockTimeoutFromEnv's.)
func ConfigFromEnv(env *config.Env) *Config {
	cfg := &Config{
		MaxAge:       idem.KeyLifetimeFromEnv(env),
		RetainReaped: env.Duration("REAPED_KEY_RETENTION", DefaultRetainReaped),
		BatchSize:    env.Int("REAPER_BATCH_SIZE", DefaultBatchSize),
		PollInterval: env.Duration("REAPER_POLL_INTERVAL", DefaultPollInterval),
		DutyCycle:    env.Fraction("REAPER_DUTY_CYCLE", DefaultDutyCycle),
	}
	// A record forgotten as soon as its key is reaped refuses nothing.
	if cfg.MaxAge > 0 && cfg.RetainReaped > 0 && cfg.RetainReaped <= cfg.MaxAge {
		env.Refuse("REAPED_KEY_RETENTION", fmt.Sprintf(
			"must exceed REAPER_MAX_AGE (%s): a key's record must outlive the key, or a late retry under it starts a new request, and a new charge",
			config.FormatDuration(cfg.MaxAge)))
	}
	return cfg
}
