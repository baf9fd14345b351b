package simulator

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the simulator's; its flags override them.
var Variables = config.Declare(
	config.Setting{Name: "API_URL", Type: config.TypeURL,
		Help: "the api's base URL (-url)"},
	config.Setting{Name: "SIMULATOR_TOKEN", Type: config.TypeString, Secret: true,
		Help: "the API token rides are sent with (-token); unset: SEED_USER_TOKEN, else the seed's dev token of user@example.com"},
	config.Setting{Name: "SIMULATOR_ERROR_RATE", Type: config.TypeFraction, Zero: "no ride asks for a failure",
		Help: "the share of rides sent with raise_error=true (-error-rate)"},
	config.Setting{Name: "SIMULATOR_MAX_PAUSE", Type: config.TypeDuration, Zero: "rides back to back",
		Help: "rides are a random 0 to this apart (-max-pause)"},
	config.Setting{Name: "SIMULATOR_TIMEOUT", Type: config.TypeDuration,
		Help: "how long one HTTP attempt may take (-timeout)"},
	config.Setting{Name: "SIMULATOR_MAX_ATTEMPTS", Type: config.TypeInt, Unit: "attempts",
		Help: "attempts per ride, the first included (-attempts)"},
	config.Setting{Name: "SIMULATOR_JOURNAL", Type: config.TypeString,
		Help: "the file each ride is written down in before its first try, resumed when the simulator starts again (-journal); unset: no journal (make dev sets .data/simulator/rides-journal)"},
	config.Setting{Name: "SIMULATOR_MAX_BACKOFF", Type: config.TypeDuration,
		Help: "the longest wait between two attempts of a ride; an answer asking for a longer one (Retry-After) ends the ride's retries (-max-backoff)"},
)
