package operator

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
)

// The password rule: what CheckPassword refuses, each by name.
const (
	// MinPasswordLength: at twelve characters a guessed password is out
	// of reach of the throttled login (a few dozen guesses an hour per
	// account and per address), and a passphrase of three words fits.
	MinPasswordLength = 12
	// MaxPasswordLength keeps what is hashed a password, not a file.
	MaxPasswordLength = 1024
)

// PasswordError is CheckPassword's refusal: Reason says which rule, for
// the person who chose the password.
type PasswordError struct{ Reason string }

func (e *PasswordError) Error() string { return "password refused: " + e.Reason }

// CheckPassword refuses a password for the account name that is below the
// console's minimum strength: blank (only whitespace), holding a control
// character, shorter than
// MinPasswordLength or longer than MaxPasswordLength characters, one
// character repeated, or the account's own name. There is no default and
// no exception: make dev's account passes the same rule.
func CheckPassword(name, password string) error {
	n := utf8.RuneCountInString(password)
	first, _ := utf8.DecodeRuneInString(password)
	switch {
	case !utf8.ValidString(password):
		return &PasswordError{"the password is not valid UTF-8"}
	case strings.TrimSpace(password) == "":
		return &PasswordError{"the password is blank"}
	case strings.ContainsFunc(password, unicode.IsControl):
		return &PasswordError{"the password holds a control character (a line break, a tab), which the login form cannot take"}
	case n < MinPasswordLength:
		return &PasswordError{fmt.Sprintf("the password has %d characters, at least %d", n, MinPasswordLength)}
	case n > MaxPasswordLength:
		return &PasswordError{fmt.Sprintf("the password has %d characters, at most %d", n, MaxPasswordLength)}
	case strings.Count(password, string(first)) == n:
		return &PasswordError{"the password is one character repeated"}
	case strings.EqualFold(strings.TrimSpace(password), name):
		return &PasswordError{"the password is the account's name"}
	}
	return nil
}

// argon2id's parameters for a new hash: the first of OWASP's Password
// Storage Cheat Sheet (19 MiB, two passes, one lane), some 50 ms. A
// stored hash carries its own, so raising these later only changes new
// hashes.
const (
	argonMemory  = 19 * 1024 // KiB
	argonTime    = 2
	argonThreads = 1
	argonKeyLen  = 32
	argonSaltLen = 16
)

// hashPassword returns password's argon2id hash, with a new random salt,
// in the PHC string form: $argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>.
func hashPassword(password string) string {
	salt := make([]byte, argonSaltLen)
	_, _ = rand.Read(salt) // never fails (crypto/rand)
	key := argon2.IDKey([]byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, argonMemory, argonTime, argonThreads, b64.EncodeToString(salt), b64.EncodeToString(key))
}

// errBadHash: a stored hash that is not an argon2id PHC string this
// package wrote. The schema refuses any other kind.
var errBadHash = errors.New("operator: the stored password hash is not an argon2id hash")

// verifyPassword reports whether password is the one encoded hashes, with
// the parameters encoded carries, in constant time.
func verifyPassword(encoded, password string) (bool, error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, errBadHash
	}
	var (
		version          int
		memory, passes   uint32
		threads          uint8
		b64              = base64.RawStdEncoding
		salt, key        []byte
		errVersion, errP error
	)
	_, errVersion = fmt.Sscanf(parts[2], "v=%d", &version)
	_, errP = fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &memory, &passes, &threads)
	salt, errSalt := b64.DecodeString(parts[4])
	key, errKey := b64.DecodeString(parts[5])
	// Bounds on what is read back, so that a tampered row cannot make a
	// login allocate gigabytes or spin for minutes.
	if err := errors.Join(errVersion, errP, errSalt, errKey); err != nil || version != argon2.Version ||
		memory < 8 || memory > 1<<20 || passes < 1 || passes > 16 || threads < 1 || len(salt) < 8 || len(key) < 16 || len(key) > 64 {
		return false, errBadHash
	}
	got := argon2.IDKey([]byte(password), salt, passes, memory, threads, uint32(len(key)))
	return subtle.ConstantTimeCompare(got, key) == 1, nil
}
