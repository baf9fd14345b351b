package user

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the API tokens cmd/seed gives the demo users.
var Variables = config.Declare(
	config.Setting{Name: "SEED_USER_TOKEN", Type: config.TypeString, Secret: true,
		Help: "the API token of the demo user user@example.com, whose card works (also the simulator's, unless SIMULATOR_TOKEN is set)"},
	config.Setting{Name: "SEED_BAD_SOURCE_TOKEN", Type: config.TypeString, Secret: true,
		Help: "the API token of the demo user user-bad-source@example.com, whose card is always declined"},
)

// The demo users' API tokens for development (SEED_USER_TOKEN,
// SEED_BAD_SOURCE_TOKEN override them): cmd/seed gives them, and the
// simulator sends rides with the first.
const (
	DemoToken          = "rr_dev_token_user_0123456789"
	DemoBadSourceToken = "rr_dev_token_bad_source_0123456789"
)
