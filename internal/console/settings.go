package console

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables are the console's own settings (cmd/console). It also reads
// the api's settings for the ride service it acts through, HOST and PORT
// for its listener, and SIMULATED_ERRORS for the lab. It has no password
// setting: people log in to their own accounts (console operator add).
var Variables = config.Declare(
	config.Setting{Name: "CONSOLE_TRUST_PROXY", Type: config.TypeBool,
		Help: "true: believe X-Forwarded-Proto and the last address of X-Forwarded-For, as the reverse proxy that browsers reach the console through sets them (https there: a Secure cookie, and only an https Origin may post; the address: what a login is throttled and logged by, and what a settlement's audit record names); leave it false where browsers reach the console directly"},
	config.Setting{Name: "CONSOLE_API_URL", Type: config.TypeURL,
		Help: "the api's base URL, where the lab sends its rides (SIMULATED_ERRORS=true only)"},
	config.Setting{Name: "CONSOLE_LAB_TOKEN", Type: config.TypeString, Secret: true,
		Help: "the API token the lab sends rides with; unset: SEED_USER_TOKEN, else the seed's dev token of user@example.com"},
	config.Setting{Name: "CONSOLE_LAB_TIMEOUT", Type: config.TypeDuration,
		Help: "the lab's client timeout per attempt, as a mobile app's"},
	config.Setting{Name: "CONSOLE_LOGIN_FIRST_WAIT", Type: config.TypeDuration,
		Help: "how long a login waits after five in a row failed at its account or from its address; each further failure doubles it, up to 15m"},
)
