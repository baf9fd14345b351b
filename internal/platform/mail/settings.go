package mail

import "github.com/rocketrides/rocketrides/internal/platform/config"

// Variables say where mail goes.
var Variables = config.Declare(
	config.Setting{Name: "SMTP_URL", Type: config.TypeURL,
		Help: "send mail through this SMTP server, such as smtp://user:password@127.0.0.1:1025; unset writes .eml files into MAIL_DIR"},
	config.Setting{Name: "MAIL_DIR", Type: config.TypeString,
		Help: "the directory .eml files are written to when SMTP_URL is unset; unset is .data/mail in the checkout"},
)
