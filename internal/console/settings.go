package console

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the console's own settings (cmd/console). It also reads
// the api's settings for the ride service it acts through, HOST and PORT
// for its listener, and SIMULATED_ERRORS for the lab.
var Variables = config.Declare(
	config.Setting{Name: "CONSOLE_PASSWORD", Type: config.TypeString, Secret: true, Required: true,
		Help: "the password of the console's login; no default outside make dev"},
	config.Setting{Name: "CONSOLE_API_URL", Type: config.TypeURL,
		Help: "the api's base URL, where the lab sends its rides (SIMULATED_ERRORS=true only)"},
	config.Setting{Name: "CONSOLE_LAB_TOKEN", Type: config.TypeString, Secret: true,
		Help: "the API token the lab sends rides with; unset: SEED_USER_TOKEN, else the seed's dev token of user@example.com"},
	config.Setting{Name: "CONSOLE_LAB_TIMEOUT", Type: config.TypeDuration,
		Help: "the lab's client timeout per attempt, as a mobile app's"},
)
