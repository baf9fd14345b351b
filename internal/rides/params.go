package rides

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/rocketrides/rocketrides/internal/platform/problem"
)

// Params are the parameters of POST /rides.
type Params struct {
	OriginLat float64 `json:"origin_lat"`
	OriginLon float64 `json:"origin_lon"`
	TargetLat float64 `json:"target_lat"`
	TargetLon float64 `json:"target_lon"`
}

// Canonical is the request's fingerprint as stored on the idempotency key:
// fixed key order and Go's shortest number spelling, so that a form
// request and a JSON request with the same values are the same request.
// Keys also compare as JSONB, which ignores order and spelling; the
// canonical form keeps the stored params readable and stable.
func (p Params) Canonical() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		// Params hold only finite floats (parseParams guarantees it).
		panic("encode ride params: " + err.Error())
	}
	return b
}

// ErrUnsupportedMediaType means the body is neither JSON nor a form.
var ErrUnsupportedMediaType = errors.New("unsupported media type")

// MalformedError means the body could not be decoded at all.
type MalformedError struct{ Err error }

func (e *MalformedError) Error() string { return "malformed request body: " + e.Err.Error() }
func (e *MalformedError) Unwrap() error { return e.Err }

// MaxInvalidParams is how many rejected parameters a ParamError lists. A
// body of thousands of unknown fields gets a short answer that counts the
// rest, not an answer larger than the request.
const MaxInvalidParams = 20

// ParamError lists the parameters that are missing, unknown or invalid:
// the first MaxInvalidParams of them, and how many more there are.
type ParamError struct {
	// Params are the rejected parameters, each once, at most
	// MaxInvalidParams of them. A name the client made up is clipped
	// (problem.Clip).
	Params []InvalidParam
	// Unlisted counts the rejected parameters past Params.
	Unlisted int
	// Hint says what the client most likely meant to do, when that is
	// clear from the body (jsonSentAsForm). Empty otherwise.
	Hint string
}

// InvalidParam is one rejected parameter and why.
type InvalidParam struct {
	Name   string
	Reason string
}

// Error counts the rejected parameters without naming them: the names
// and reasons are in Params (a problem's invalid_params), once.
func (e *ParamError) Error() string {
	total := len(e.Params) + e.Unlisted
	var msg string
	switch {
	case total == 1:
		msg = "1 parameter is invalid; invalid_params says which and why"
	case e.Unlisted == 0:
		msg = fmt.Sprintf("%d parameters are invalid; invalid_params says which and why", total)
	default:
		msg = fmt.Sprintf("%d parameters are invalid; invalid_params lists the first %d, and %d more",
			total, len(e.Params), e.Unlisted)
	}
	if e.Hint != "" {
		msg += ". " + e.Hint
	}
	return msg
}

// jsonSentAsForm is the hint for a form body whose one parameter name is
// a JSON object: JSON sent without its Content-Type, as curl -d sends it.
const jsonSentAsForm = "The body looks like JSON sent as a form " +
	"(Content-Type: application/x-www-form-urlencoded, curl -d's default): set Content-Type: application/json"

// looksLikeJSON reports whether raw is a form that parsed as one name,
// without a value, that begins like a JSON object.
func (raw rawParams) looksLikeJSON() bool {
	if len(raw) != 1 {
		return false
	}
	for name, v := range raw {
		return v.text == "" && strings.HasPrefix(strings.TrimSpace(name), "{")
	}
	return false
}

// SimulateErrorParam asks the API to fail on purpose after the ride is
// created, so that the simulator exercises recovery. It is honoured only
// when simulated errors are enabled, and it is not part of the request's
// fingerprint: the retry without it is the same request.
const SimulateErrorParam = "raise_error"

// rawParams are the parameters as decoded, before validation: each value
// is the literal text of a form value or of a JSON number.
type rawParams map[string]rawValue

type rawValue struct {
	text     string
	isNumber bool // false for a JSON value that is not a number
	repeated bool
}

// decodeBody decodes a POST /rides body into raw parameters according to
// its Content-Type.
func decodeBody(contentType string, body io.Reader) (rawParams, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, err // *http.MaxBytesError is handled by the caller
	}
	mediaType := ""
	if contentType != "" {
		mediaType, _, err = mime.ParseMediaType(contentType)
		if err != nil {
			return nil, fmt.Errorf("%w: %q", ErrUnsupportedMediaType, problem.Clip(contentType))
		}
	}
	switch {
	case mediaType == "application/json":
		return decodeJSON(data)
	case mediaType == "application/x-www-form-urlencoded":
		return decodeForm(data)
	case mediaType == "" && len(bytes.TrimSpace(data)) == 0:
		// No body at all: every parameter is missing, which the
		// validation step reports by name.
		return rawParams{}, nil
	default:
		return nil, fmt.Errorf("%w: %q (send application/json or application/x-www-form-urlencoded)", ErrUnsupportedMediaType, problem.Clip(contentType))
	}
}

func decodeForm(data []byte) (rawParams, error) {
	values, err := url.ParseQuery(string(data))
	if err != nil {
		return nil, &MalformedError{Err: fmt.Errorf("form: %w", err)}
	}
	raw := rawParams{}
	for name, vs := range values {
		raw[name] = rawValue{text: vs[0], isNumber: decimalNumber.MatchString(vs[0]), repeated: len(vs) > 1}
	}
	return raw, nil
}

// decimalNumber is the number syntax a form value may use: plain decimal
// with an optional exponent. strconv.ParseFloat alone would also take Go's
// hex floats and digit separators, which no client means.
var decimalNumber = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

// decodeJSON walks the object token by token rather than unmarshalling
// into a struct: that is how duplicate and unknown keys, and numbers
// sent as strings, are noticed instead of silently accepted.
func decodeJSON(data []byte) (rawParams, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, malformedJSON(data, dec, "", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, &MalformedError{Err: errors.New("json: body must be an object")}
	}
	raw := rawParams{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, malformedJSON(data, dec, "", err)
		}
		name := tok.(string) // object keys are always strings
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, malformedJSON(data, dec, fmt.Sprintf("value of %q: ", problem.Clip(name)), err)
		}
		_, seen := raw[name]
		v := rawValue{text: string(value), repeated: seen}
		// A JSON number starts with a minus sign or a digit; this also
		// keeps null, which decodes into json.Number, from counting.
		if len(value) > 0 && (value[0] == '-' || value[0] >= '0' && value[0] <= '9') {
			v.isNumber = true
		}
		raw[name] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, malformedJSON(data, dec, "", err)
	}
	if dec.More() {
		return nil, &MalformedError{Err: fmt.Errorf("json: unexpected data after the object at %s", position(data, dec.InputOffset()))}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &MalformedError{Err: fmt.Errorf("json: unexpected data after the object at %s", position(data, dec.InputOffset()))}
	}
	return raw, nil
}

// malformedJSON says what is wrong with data, which dec failed to read
// with err, and where: encoding/json alone says "EOF", or "invalid
// character" without a place.
func malformedJSON(data []byte, dec *json.Decoder, what string, err error) *MalformedError {
	var syntax *json.SyntaxError
	switch {
	case len(bytes.TrimSpace(data)) == 0:
		return &MalformedError{Err: errors.New("json: the body is empty; send a JSON object")}
	case errors.As(err, &syntax):
		// Offset counts the bytes read, the offending one included.
		return &MalformedError{Err: fmt.Errorf("json: %s%s at %s", what, syntax.Error(), position(data, max(syntax.Offset-1, 0)))}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return &MalformedError{Err: fmt.Errorf("json: %sthe body ends before the object does, at %s", what, position(data, int64(len(data))))}
	}
	return &MalformedError{Err: fmt.Errorf("json: %s%w at %s", what, err, position(data, dec.InputOffset()))}
}

// position is where byte offset falls in data, as a person finds it in an
// editor and a program in the bytes: "line 2, column 14 (byte 30)", each
// counted from 1.
func position(data []byte, offset int64) string {
	offset = min(offset, int64(len(data)))
	before := data[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	column := len(before) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return fmt.Sprintf("line %d, column %d (byte %d)", line, column, offset+1)
}

// parseParams validates raw parameters. It reports every problem at once,
// each naming its parameter. raiseError reports whether the client asked
// for a simulated failure; allowSimulated says whether that parameter is
// accepted at all.
func parseParams(raw rawParams, allowSimulated bool) (p Params, raiseError bool, err error) {
	var invalid []InvalidParam
	field := func(name string, min, max float64) float64 {
		v, ok := raw[name]
		switch {
		case !ok:
			invalid = append(invalid, InvalidParam{name, "is required"})
			return 0
		case v.repeated:
			invalid = append(invalid, InvalidParam{name, "is given more than once"})
			return 0
		case !v.isNumber:
			invalid = append(invalid, InvalidParam{name, "must be a number"})
			return 0
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v.text), 64)
		switch {
		case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
			invalid = append(invalid, InvalidParam{name, "must be a finite number"})
		case f < min || f > max:
			invalid = append(invalid, InvalidParam{name, fmt.Sprintf("must be between %g and %g", min, max)})
		}
		// -0 and 0 are the same coordinate and the same request.
		return f + 0
	}
	p.OriginLat = field("origin_lat", -90, 90)
	p.OriginLon = field("origin_lon", -180, 180)
	p.TargetLat = field("target_lat", -90, 90)
	p.TargetLon = field("target_lon", -180, 180)

	if v, ok := raw[SimulateErrorParam]; ok && allowSimulated {
		switch text := strings.Trim(v.text, `"`); {
		case v.repeated:
			invalid = append(invalid, InvalidParam{SimulateErrorParam, "is given more than once"})
		case text == "true" || text == "1":
			raiseError = true
		case text == "false" || text == "0":
		default:
			invalid = append(invalid, InvalidParam{SimulateErrorParam, "must be true or false"})
		}
	}
	var unknown []string
	for name := range raw {
		switch name {
		case "origin_lat", "origin_lon", "target_lat", "target_lon":
		case SimulateErrorParam:
			if !allowSimulated {
				unknown = append(unknown, name)
			}
		default:
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	total := len(invalid) + len(unknown)
	for _, name := range unknown[:min(len(unknown), max(0, MaxInvalidParams-len(invalid)))] {
		invalid = append(invalid, InvalidParam{problem.Clip(name), "is not a known parameter"})
	}
	if total > 0 {
		perr := &ParamError{Params: invalid, Unlisted: total - len(invalid)}
		if raw.looksLikeJSON() {
			perr.Hint = jsonSentAsForm
		}
		return Params{}, false, perr
	}
	return p, raiseError, nil
}
