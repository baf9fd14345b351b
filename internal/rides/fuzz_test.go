package rides

// Fuzz targets for the request's edge: the body decoders, parameter
// validation and the Idempotency-Key header. What they defend is the
// request's fingerprint. A key is bound to the canonical params of its
// first request, so two spellings of one ride that fingerprint differently
// would turn a client's honest retry into a 422, and two rides that
// fingerprint alike would replay one ride's answer for another.
//
// The seed corpora under testdata/fuzz run with every go test. To fuzz:
//
//	go test ./internal/rides -run '^$' -fuzz '^FuzzParams$' -fuzztime 10s
//	go test ./internal/rides -run '^$' -fuzz '^FuzzEquivalentEncodings$' -fuzztime 10s
//	go test ./internal/rides -run '^$' -fuzz '^FuzzIdempotencyKey$' -fuzztime 10s

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	jsonType = "application/json"
	formType = "application/x-www-form-urlencoded"
)

// paramNames are the fingerprinted params, with their bounds.
var paramNames = []struct {
	name     string
	min, max float64
}{
	{"origin_lat", -90, 90},
	{"origin_lon", -180, 180},
	{"target_lat", -90, 90},
	{"target_lon", -180, 180},
}

func (p Params) values() []float64 {
	return []float64{p.OriginLat, p.OriginLon, p.TargetLat, p.TargetLon}
}

// parseBody is the handler's path from body to params.
func parseBody(contentType string, body []byte, allowSimulated bool) (Params, bool, error) {
	raw, err := decodeBody(contentType, bytes.NewReader(body))
	if err != nil {
		return Params{}, false, err
	}
	return parseParams(raw, allowSimulated)
}

// mustCanonical parses a body that has to be accepted and returns its
// fingerprint.
func mustCanonical(t *testing.T, contentType string, body []byte) []byte {
	t.Helper()
	p, _, err := parseBody(contentType, body, false)
	require.NoError(t, err, "%s body %q", contentType, body)
	return p.Canonical()
}

func formBody(p Params) []byte {
	v := url.Values{}
	for i, f := range p.values() {
		v.Set(paramNames[i].name, strconv.FormatFloat(f, 'g', -1, 64))
	}
	return []byte(v.Encode())
}

func jsonBody(p Params) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range p.values() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", paramNames[i].name, strconv.FormatFloat(f, 'g', -1, 64))
	}
	b.WriteByte('}')
	return b.Bytes()
}

func FuzzParams(f *testing.F) {
	f.Add(formType, []byte("origin_lat=37.7749&origin_lon=-122.4194&target_lat=37.8044&target_lon=-122.2712"))
	f.Add(jsonType, []byte(`{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}`))

	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		for _, allowSimulated := range []bool{false, true} {
			p, raiseError, err := parseBody(contentType, body, allowSimulated)
			if err != nil {
				// Every rejection is one the handler turns into a precise
				// 4xx, never the 400 of last resort.
				var (
					malformed *MalformedError
					params    *ParamError
				)
				switch {
				case errors.Is(err, ErrUnsupportedMediaType):
				case errors.As(err, &malformed):
				case errors.As(err, &params):
					require.NotEmpty(t, params.Params)
					require.LessOrEqual(t, len(params.Params), MaxInvalidParams)
					for _, ip := range params.Params {
						require.NotEmpty(t, ip.Reason, "reason for %q", ip.Name)
					}
				default:
					t.Fatalf("unexpected error type %T: %v", err, err)
				}
				continue
			}
			if !allowSimulated {
				require.False(t, raiseError, "raise_error is refused unless simulated errors are on")
			}

			for i, v := range p.values() {
				n := paramNames[i]
				require.False(t, math.IsNaN(v) || math.IsInf(v, 0), "%s = %v", n.name, v)
				require.True(t, v >= n.min && v <= n.max, "%s = %v out of range", n.name, v)
				// -0 and 0 are one coordinate; two spellings of the
				// fingerprint for it would split one request in two.
				require.False(t, v == 0 && math.Signbit(v), "%s is -0", n.name)
			}

			canonical := p.Canonical()
			require.True(t, json.Valid(canonical), "canonical %s", canonical)
			var back Params
			require.NoError(t, json.Unmarshal(canonical, &back))
			require.Equal(t, p, back, "canonical %s does not decode to the params", canonical)

			// One meaning, one fingerprint: whatever spelling was sent,
			// the same params as JSON numbers, as a form, and as the
			// canonical form itself fingerprint identically.
			require.Equal(t, string(canonical), string(mustCanonical(t, jsonType, jsonBody(p))), "as JSON")
			require.Equal(t, string(canonical), string(mustCanonical(t, formType, formBody(p))), "as a form")
			require.Equal(t, string(canonical), string(mustCanonical(t, jsonType, canonical)), "canonical as a body")
		}
	})
}

func FuzzEquivalentEncodings(f *testing.F) {
	f.Add(37.7749, -122.4194, 37.8044, -122.2712, uint64(0))

	// spellings of a float that all parse back to it exactly.
	spellings := []byte{'g', 'e', 'E', 'f'}
	spaces := []string{"", " ", "\n", "\t", " \r\n  "}

	f.Fuzz(func(t *testing.T, originLat, originLon, targetLat, targetLon float64, seed uint64) {
		p := Params{OriginLat: originLat, OriginLon: originLon, TargetLat: targetLat, TargetLon: targetLon}
		for i, v := range p.values() {
			n := paramNames[i]
			if math.IsNaN(v) || v < n.min || v > n.max {
				t.Skip("not a valid ride") // also skips ±Inf
			}
		}
		rnd := rand.New(rand.NewPCG(seed, seed>>32|1))
		ws := func() string { return spaces[rnd.IntN(len(spaces))] }

		form := formBody(p)

		var js strings.Builder
		js.WriteString(ws() + "{")
		for i, j := range rnd.Perm(len(paramNames)) {
			if i > 0 {
				js.WriteString(ws() + ",")
			}
			spelling := spellings[rnd.IntN(len(spellings))]
			fmt.Fprintf(&js, "%s%q%s:%s%s%s", ws(), paramNames[j].name, ws(), ws(),
				strconv.FormatFloat(p.values()[j], spelling, -1, 64), ws())
		}
		js.WriteString("}" + ws())

		fromForm := mustCanonical(t, formType, form)
		fromJSON := mustCanonical(t, jsonType, []byte(js.String()))
		require.Equal(t, string(fromForm), string(fromJSON), "form %s\njson %s", form, js.String())
	})
}

func FuzzIdempotencyKey(f *testing.F) {
	f.Add("6f1c2a0e-2a57-4d53-9c6b-0a6f0f1d2b11")
	f.Add(`"6f1c2a0e-2a57-4d53-9c6b-0a6f0f1d2b11"`)

	f.Fuzz(func(t *testing.T, value string) {
		key, prob := idempotencyKey([]string{value})
		if prob != nil {
			require.Equal(t, http.StatusBadRequest, prob.Status)
			require.Contains(t, []string{"idempotency_key_missing", "idempotency_key_invalid"}, prob.Code)
			require.Empty(t, key)
			return
		}
		require.GreaterOrEqual(t, len(key), MinKeyLength)
		require.LessOrEqual(t, len(key), MaxKeyLength)
		for i := 0; i < len(key); i++ {
			require.True(t, key[i] >= 0x20 && key[i] <= 0x7e, "byte %d of %q is not printable ASCII", i, key)
		}

		// The same key sent as an RFC 8941 string is the same key.
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		again, prob := idempotencyKey([]string{quoted})
		require.Nil(t, prob, "quoted %q rejected", quoted)
		require.Equal(t, key, again, "quoted %q", quoted)

		// Sent twice, it is refused whatever it is.
		_, prob = idempotencyKey([]string{value, value})
		require.NotNil(t, prob)
	})
}
