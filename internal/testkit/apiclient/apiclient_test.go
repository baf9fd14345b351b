package apiclient_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketrides/rocketrides/internal/rides"
	"github.com/rocketrides/rocketrides/internal/testkit/apiclient"
	"github.com/rocketrides/rocketrides/internal/testkit/apitest"
)

// sanFranciscoToOakland is apitest.DefaultParams as the generated type.
var sanFranciscoToOakland = apiclient.RideParams{
	OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712,
}

// TestGeneratedClient drives the answers docs/openapi.yaml documents
// through the client generated from it, against the real API stack (a
// database of its own, the Stripe fake over HTTP). Each answer is read
// through the generated types: the typed body the client decoded for the
// status (JSON201, ApplicationproblemJSON409, ...) and the typed headers.
// Every exchange is also validated against the document by apitest.
func TestGeneratedClient(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*apitest.Stack
		// client is User's, whose card works; badSource is
		// BadSourceUser's, whose card is always declined; anonymous
		// sends no token.
		client, badSource, anonymous *apiclient.ClientWithResponses
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		stack := apitest.New(t, apitest.Options{})
		return &testBundle{
			Stack:     stack,
			client:    newClient(t, stack, stack.Token),
			badSource: newClient(t, stack, stack.BadSourceToken),
			anonymous: newClient(t, stack, ""),
		}
	}
	createRide := func(t *testing.T, client *apiclient.ClientWithResponses, key string, params apiclient.RideParams) *apiclient.CreateRideResponse {
		t.Helper()
		resp, err := client.CreateRideWithResponse(t.Context(), &apiclient.CreateRideParams{IdempotencyKey: key}, params)
		require.NoError(t, err)
		return resp
	}
	// requireCreated checks a 201 as the client sees it and returns the
	// ride it decoded.
	requireCreated := func(t *testing.T, resp *apiclient.CreateRideResponse) *apiclient.Ride {
		t.Helper()
		require.Equal(t, http.StatusCreated, resp.StatusCode(), "%s", resp.Body)
		require.Equal(t, "application/json", resp.ContentType())
		require.NotNil(t, resp.JSON201, "the 201 body decoded as a Ride")
		require.NotNil(t, resp.Headers201)
		require.NotEmpty(t, resp.Headers201.RequestId)
		return resp.JSON201
	}

	t.Run("CreatesRide", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		resp := createRide(t, b.client, apitest.NewKey(), sanFranciscoToOakland)
		ride := requireCreated(t, resp)
		require.Nil(t, resp.Headers201.IdempotentReplayed, "a first answer is not a replay")
		require.Positive(t, ride.Id)
		require.WithinDuration(t, time.Now(), ride.CreatedAt, time.Minute)
		require.Equal(t, sanFranciscoToOakland, apiclient.RideParams{
			OriginLat: ride.OriginLat, OriginLon: ride.OriginLon, TargetLat: ride.TargetLat, TargetLon: ride.TargetLon,
		})
		require.EqualValues(t, rides.Price, ride.Amount)
		require.Equal(t, rides.Currency, ride.Currency)
		require.NotNil(t, ride.StripeChargeId, "a created ride is charged")

		charges := b.Stripe.Charges()
		require.Len(t, charges, 1)
		require.Equal(t, charges[0].ID, *ride.StripeChargeId)
		require.EqualValues(t, ride.Amount, charges[0].Amount)
	})

	// The client's form encoding and its JSON encoding of the same
	// parameters are one request: the second is a replay of the first.
	t.Run("FormAndJSONAreTheSameRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()

		form, err := b.client.CreateRideWithFormdataBodyWithResponse(t.Context(),
			&apiclient.CreateRideParams{IdempotencyKey: key}, sanFranciscoToOakland)
		require.NoError(t, err)
		ride := requireCreated(t, form)

		asJSON := createRide(t, b.client, key, sanFranciscoToOakland)
		require.Equal(t, ride, requireCreated(t, asJSON))
		require.NotNil(t, asJSON.Headers201.IdempotentReplayed)
		require.True(t, *asJSON.Headers201.IdempotentReplayed)
	})

	t.Run("ReplaysFinishedKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()

		first := createRide(t, b.client, key, sanFranciscoToOakland)
		ride := requireCreated(t, first)
		second := createRide(t, b.client, key, sanFranciscoToOakland)
		require.Equal(t, ride, requireCreated(t, second))
		require.Equal(t, string(first.Body), string(second.Body), "a replay is the same bytes")
		require.NotNil(t, second.Headers201.IdempotentReplayed, "a replay says so")
		require.True(t, *second.Headers201.IdempotentReplayed)
		require.NotEqual(t, first.Headers201.RequestId, second.Headers201.RequestId, "a replay is a request of its own")
		require.Equal(t, 1, b.Stripe.Stats().ChargeRequests, "a replay charges nothing")
	})

	t.Run("RefusesKeyInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		b.Claim(t, key) // another request holds the key's lock

		resp := createRide(t, b.client, key, sanFranciscoToOakland)
		requireProblem(t, resp, resp.ApplicationproblemJSON409, http.StatusConflict, apiclient.ProblemCodeRequestInProgress)
		require.NotNil(t, resp.Headers409)
		require.Positive(t, resp.Headers409.RetryAfter, "Retry-After says when to retry")
		require.Zero(t, b.Count(t, `SELECT count(*) FROM rides`))
	})

	t.Run("RefusesKeyReusedWithOtherParams", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()
		requireCreated(t, createRide(t, b.client, key, sanFranciscoToOakland))

		resp := createRide(t, b.client, key, apiclient.RideParams{OriginLat: 0, OriginLon: 0, TargetLat: 1, TargetLon: 1})
		requireProblem(t, resp, resp.ApplicationproblemJSON422, http.StatusUnprocessableEntity, apiclient.ProblemCodeIdempotencyKeyReused)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
	})

	t.Run("StoresDeclinedCard", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := apitest.NewKey()

		first := createRide(t, b.badSource, key, sanFranciscoToOakland)
		requireProblem(t, first, first.ApplicationproblemJSON402, http.StatusPaymentRequired, apiclient.ProblemCodeCardDeclined)
		require.NotNil(t, first.Headers402)
		require.Nil(t, first.Headers402.IdempotentReplayed)

		second := createRide(t, b.badSource, key, sanFranciscoToOakland)
		requireProblem(t, second, second.ApplicationproblemJSON402, http.StatusPaymentRequired, apiclient.ProblemCodeCardDeclined)
		require.Equal(t, string(first.Body), string(second.Body), "the stored decline is replayed")
		require.NotNil(t, second.Headers402.IdempotentReplayed)
		require.True(t, *second.Headers402.IdempotentReplayed)
		require.Equal(t, 1, b.Stripe.Stats().ChargeRequests, "the decline is not retried at Stripe")
	})

	t.Run("RefusesMissingKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		// No parameters: the client sends no Idempotency-Key header.
		resp, err := b.client.CreateRideWithResponse(t.Context(), nil, sanFranciscoToOakland)
		require.NoError(t, err)
		requireProblem(t, resp, resp.ApplicationproblemJSON400, http.StatusBadRequest, apiclient.ProblemCodeIdempotencyKeyMissing)
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys`), "a refused request leaves nothing behind")
	})

	t.Run("RefusesInvalidKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		for _, key := range []string{"too-short", strings.Repeat("k", 256), "not-ascii-ключ-ключ-ключ"} {
			resp := createRide(t, b.client, key, sanFranciscoToOakland)
			requireProblem(t, resp, resp.ApplicationproblemJSON400, http.StatusBadRequest, apiclient.ProblemCodeIdempotencyKeyInvalid)
		}
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys`), "a refused request leaves nothing behind")
	})

	t.Run("RefusesUnauthorized", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		for _, client := range []*apiclient.ClientWithResponses{b.anonymous, newClient(t, b.Stack, "tok-unknown")} {
			created := createRide(t, client, apitest.NewKey(), sanFranciscoToOakland)
			requireProblem(t, created, created.ApplicationproblemJSON401, http.StatusUnauthorized, apiclient.ProblemCodeUnauthorized)
			require.NotNil(t, created.Headers401)
			require.True(t, strings.HasPrefix(created.Headers401.WWWAuthenticate, "Bearer "),
				"WWW-Authenticate %q names the bearer scheme", created.Headers401.WWWAuthenticate)

			listed, err := client.ListRidesWithResponse(t.Context(), nil)
			require.NoError(t, err)
			requireProblem(t, listed, listed.ApplicationproblemJSON401, http.StatusUnauthorized, apiclient.ProblemCodeUnauthorized)

			got, err := client.GetRideWithResponse(t.Context(), 1)
			require.NoError(t, err)
			requireProblem(t, got, got.ApplicationproblemJSON401, http.StatusUnauthorized, apiclient.ProblemCodeUnauthorized)
		}
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys`), "a refused request leaves nothing behind")
	})

	t.Run("RefusesMalformedBody", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		resp, err := b.client.CreateRideWithBodyWithResponse(t.Context(),
			&apiclient.CreateRideParams{IdempotencyKey: apitest.NewKey()}, "application/json", strings.NewReader(`{"origin_lat": 1,`))
		require.NoError(t, err)
		requireProblem(t, resp, resp.ApplicationproblemJSON400, http.StatusBadRequest, apiclient.ProblemCodeMalformedBody)
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys`), "a refused request leaves nothing behind")
	})

	// A body of the documented type whose values the document's schema
	// refuses: each parameter is named in invalid_params.
	t.Run("RefusesInvalidParams", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		resp := createRide(t, b.client, apitest.NewKey(), apiclient.RideParams{OriginLat: 90.5, OriginLon: -180.5, TargetLat: 0, TargetLon: 0})
		requireProblem(t, resp, resp.ApplicationproblemJSON422, http.StatusUnprocessableEntity, apiclient.ProblemCodeInvalidParams)
		require.NotNil(t, resp.ApplicationproblemJSON422.InvalidParams)
		var names []string
		for _, p := range *resp.ApplicationproblemJSON422.InvalidParams {
			require.NotEmpty(t, p.Reason, p.Name)
			names = append(names, p.Name)
		}
		require.ElementsMatch(t, []string{"origin_lat", "origin_lon"}, names)
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys`), "a refused request leaves nothing behind")
	})

	t.Run("ListsRidesNewestFirstByPage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var created []apiclient.Ride
		for range 3 {
			created = append(created, *requireCreated(t, createRide(t, b.client, apitest.NewKey(), sanFranciscoToOakland)))
		}
		list := func(params *apiclient.ListRidesParams) *apiclient.RideList {
			t.Helper()
			resp, err := b.client.ListRidesWithResponse(t.Context(), params)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode(), "%s", resp.Body)
			require.NotNil(t, resp.JSON200, "the 200 body decoded as a RideList")
			require.NotNil(t, resp.Headers200)
			require.NotEmpty(t, resp.Headers200.RequestId)
			require.Equal(t, apiclient.RideListObject("list"), resp.JSON200.Object)
			require.Equal(t, apiclient.RideListUrl("/rides"), resp.JSON200.Url)
			return resp.JSON200
		}

		all := list(nil)
		require.Equal(t, []apiclient.Ride{created[2], created[1], created[0]}, all.Data, "every ride, newest first, as created")
		require.False(t, all.HasMore)

		first := list(&apiclient.ListRidesParams{Limit: new(2)})
		require.Equal(t, []apiclient.Ride{created[2], created[1]}, first.Data)
		require.True(t, first.HasMore)

		next := list(&apiclient.ListRidesParams{Limit: new(2), StartingAfter: &first.Data[1].Id})
		require.Equal(t, []apiclient.Ride{created[0]}, next.Data)
		require.False(t, next.HasMore)

		require.Empty(t, listWith(t, b.badSource).Data, "another user's rides are not listed")
	})

	t.Run("RefusesInvalidQuery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		resp, err := b.client.ListRidesWithResponse(t.Context(), &apiclient.ListRidesParams{Limit: new(1000)})
		require.NoError(t, err)
		requireProblem(t, resp, resp.ApplicationproblemJSON400, http.StatusBadRequest, apiclient.ProblemCodeInvalidQuery)
	})

	// HEAD /rides used to declare none of GET's parameters: a generated
	// client could not send them.
	t.Run("HeadSendsTheListsParameters", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		refused, err := b.client.ListRidesHeadWithResponse(t.Context(), &apiclient.ListRidesHeadParams{Limit: new(1000)})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, refused.StatusCode(), "the limit reached the API")
		require.NotNil(t, refused.Headers400)
		require.NotEmpty(t, refused.Headers400.RequestId)

		status := apiclient.Pending
		listed, err := b.client.ListRidesHeadWithResponse(t.Context(), &apiclient.ListRidesHeadParams{Limit: new(1), Status: &status})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, listed.StatusCode())
		require.Empty(t, listed.Body)
	})

	t.Run("GetsOwnRide", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		created := requireCreated(t, createRide(t, b.client, apitest.NewKey(), sanFranciscoToOakland))

		resp, err := b.client.GetRideWithResponse(t.Context(), created.Id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), "%s", resp.Body)
		require.NotNil(t, resp.JSON200, "the 200 body decoded as a Ride")
		require.Equal(t, created, resp.JSON200)
	})

	t.Run("HidesAnotherUsersRide", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		created := requireCreated(t, createRide(t, b.client, apitest.NewKey(), sanFranciscoToOakland))

		// Another user's ride answers as a ride that does not exist.
		resp, err := b.badSource.GetRideWithResponse(t.Context(), created.Id)
		require.NoError(t, err)
		requireProblem(t, resp, resp.ApplicationproblemJSON404, http.StatusNotFound, apiclient.ProblemCodeRideNotFound)

		unknown, err := b.client.GetRideWithResponse(t.Context(), created.Id+1)
		require.NoError(t, err)
		requireProblem(t, unknown, unknown.ApplicationproblemJSON404, http.StatusNotFound, apiclient.ProblemCodeRideNotFound)
	})
}

// newClient returns a generated client for the stack that authenticates
// with token (none when empty) and sends through apitest's Doer, so that
// every exchange is also validated against docs/openapi.yaml.
func newClient(t *testing.T, stack *apitest.Stack, token string) *apiclient.ClientWithResponses {
	t.Helper()
	client, err := apiclient.NewClientWithResponses(stack.URL,
		apiclient.WithHTTPClient(stack.Doer(t)),
		apiclient.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			return nil
		}))
	require.NoError(t, err)
	return client
}

// listWith lists the first page of rides as client's user.
func listWith(t *testing.T, client *apiclient.ClientWithResponses) *apiclient.RideList {
	t.Helper()
	resp, err := client.ListRidesWithResponse(t.Context(), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), "%s", resp.Body)
	require.NotNil(t, resp.JSON200)
	return resp.JSON200
}

// response is what every generated response type has.
type response interface {
	StatusCode() int
	ContentType() string
	GetBody() []byte
}

// requireProblem checks that resp is the documented problem: the client
// decoded it into the typed field for its status (problem, such as
// resp.ApplicationproblemJSON409), with the documented code.
func requireProblem(t *testing.T, resp response, problem *apiclient.Problem, status int, code apiclient.ProblemCode) {
	t.Helper()
	require.Equal(t, status, resp.StatusCode(), "%s", resp.GetBody())
	require.Equal(t, "application/problem+json", resp.ContentType())
	require.NotNil(t, problem, "the %d body decoded as a Problem: %s", status, resp.GetBody())
	require.Equal(t, code, problem.Code, "%s", resp.GetBody())
	require.True(t, problem.Code.Valid(), "code %q is in the ProblemCode enum", problem.Code)
	require.Equal(t, status, problem.Status)
	require.True(t, strings.HasSuffix(problem.Type, "#"+string(code)), "type %q ends in #%s", problem.Type, code)
	require.NotEmpty(t, problem.Title)
}
