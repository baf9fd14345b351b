package fakestripe

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Stripe's limits on metadata. Enforced because a client that exceeds them
// would be rejected by the real API too, and should find out here first.
const (
	maxMetadataKeys        = 50
	maxMetadataKeyLength   = 40
	maxMetadataValueLength = 500
)

// Limits of a list page.
const (
	defaultListLimit = 10
	maxListLimit     = 100
)

// bracketKey reports whether form key is name[sub], as stripe-go encodes
// hashes and arrays (metadata[ride_id], expand[0]), and returns sub.
func bracketKey(key, name string) (string, bool) {
	rest, ok := strings.CutPrefix(key, name+"[")
	if !ok || !strings.HasSuffix(rest, "]") {
		return "", false
	}
	return strings.TrimSuffix(rest, "]"), true
}

// parseMetadata collects metadata[key]=value pairs. Stripe always renders
// metadata as an object, so the result is never nil.
func parseMetadata(form url.Values) (map[string]string, *apiError) {
	metadata := make(map[string]string)
	for formKey, values := range form {
		key, ok := bracketKey(formKey, "metadata")
		if !ok {
			continue
		}
		value := values[len(values)-1]
		switch {
		case key == "":
			return nil, invalidRequest(http.StatusBadRequest, "", "metadata", "Metadata keys must not be empty.")
		case len(key) > maxMetadataKeyLength:
			return nil, invalidRequest(http.StatusBadRequest, "", "metadata",
				"Metadata keys can have up to %d characters, but you passed in a key that is %d characters: '%s'.",
				maxMetadataKeyLength, len(key), key)
		case len(value) > maxMetadataValueLength:
			return nil, invalidRequest(http.StatusBadRequest, "", "metadata",
				"Metadata values can have up to %d characters, but you passed in a value that is %d characters.",
				maxMetadataValueLength, len(value))
		}
		metadata[key] = value
	}
	if len(metadata) > maxMetadataKeys {
		return nil, invalidRequest(http.StatusBadRequest, "", "metadata",
			"You can have up to %d metadata keys, but you passed in %d.", maxMetadataKeys, len(metadata))
	}
	return metadata, nil
}

// parseExpand collects the fields named by expand[]=..., expand[0]=... or
// expand=....
func parseExpand(form url.Values) map[string]bool {
	expand := make(map[string]bool)
	for key, values := range form {
		if _, ok := bracketKey(key, "expand"); !ok && key != "expand" {
			continue
		}
		for _, v := range values {
			expand[v] = true
		}
	}
	return expand
}

// parseInt reads an optional integer parameter.
func parseInt(form url.Values, param string) (n int64, present bool, err *apiError) {
	raw := form.Get(param)
	if raw == "" {
		return 0, false, nil
	}
	n, parseErr := strconv.ParseInt(raw, 10, 64)
	if parseErr != nil {
		return 0, true, invalidInteger(param, raw)
	}
	return n, true, nil
}

// listParams are the parameters every list endpoint takes.
type listParams struct {
	limit         int
	startingAfter string
	endingBefore  string
	created       createdFilter
	expand        map[string]bool
}

// createdFilter is created=t or any of created[gt|gte|lt|lte]=t.
type createdFilter struct {
	gt, gte, lt, lte *int64
}

func (f createdFilter) matches(created int64) bool {
	return (f.gt == nil || created > *f.gt) &&
		(f.gte == nil || created >= *f.gte) &&
		(f.lt == nil || created < *f.lt) &&
		(f.lte == nil || created <= *f.lte)
}

func parseListParams(query url.Values) (listParams, *apiError) {
	p := listParams{
		limit:         defaultListLimit,
		startingAfter: query.Get("starting_after"),
		endingBefore:  query.Get("ending_before"),
		expand:        parseExpand(query),
	}
	if p.startingAfter != "" && p.endingBefore != "" {
		return listParams{}, invalidRequest(http.StatusBadRequest, "parameters_exclusive", "ending_before",
			"You may only specify one of these parameters: ending_before, starting_after.")
	}

	limit, present, apiErr := parseInt(query, "limit")
	if apiErr != nil {
		return listParams{}, apiErr
	}
	if present {
		if limit < 1 || limit > maxListLimit {
			return listParams{}, invalidRequest(http.StatusBadRequest, "", "limit",
				"Invalid limit: must be between 1 and %d", maxListLimit)
		}
		p.limit = int(limit)
	}

	created, present, apiErr := parseInt(query, "created")
	if apiErr != nil {
		return listParams{}, apiErr
	}
	if present {
		p.created.gte, p.created.lte = &created, &created
	}
	for op, bound := range map[string]**int64{
		"gt": &p.created.gt, "gte": &p.created.gte, "lt": &p.created.lt, "lte": &p.created.lte,
	} {
		n, present, apiErr := parseInt(query, "created["+op+"]")
		if apiErr != nil {
			return listParams{}, apiErr
		}
		if present {
			*bound = &n
		}
	}
	return p, nil
}

// list is Stripe's list envelope.
type list[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
}

// newestFirst orders objects as Stripe lists them, most recently created
// first. Objects come in creation order, which breaks ties within a second.
func newestFirst[T any](inCreationOrder []T, created func(T) int64) []T {
	sorted := slices.Clone(inCreationOrder)
	slices.Reverse(sorted)
	slices.SortStableFunc(sorted, func(a, b T) int { return cmp.Compare(created(b), created(a)) })
	return sorted
}

// paginate cuts one page out of all (newest first) for p, keeping only the
// objects keep accepts. The cursor object is found among all objects, not
// only the kept ones, as Stripe does.
func paginate[T any](all []T, id func(T) string, keep func(T) bool, p listParams, object string) ([]T, bool, *apiError) {
	candidates := all
	switch {
	case p.startingAfter != "":
		i := slices.IndexFunc(all, func(v T) bool { return id(v) == p.startingAfter })
		if i < 0 {
			return nil, false, noSuch(http.StatusBadRequest, "starting_after", object, p.startingAfter)
		}
		candidates = all[i+1:]
	case p.endingBefore != "":
		i := slices.IndexFunc(all, func(v T) bool { return id(v) == p.endingBefore })
		if i < 0 {
			return nil, false, noSuch(http.StatusBadRequest, "ending_before", object, p.endingBefore)
		}
		candidates = all[:i]
	}

	kept := make([]T, 0) // Stripe sends "data": [], never null
	for _, v := range candidates {
		if keep(v) {
			kept = append(kept, v)
		}
	}
	if len(kept) <= p.limit {
		return kept, false, nil
	}
	if p.endingBefore != "" {
		// Paging backwards: the page is the objects just before the cursor.
		return kept[len(kept)-p.limit:], true, nil
	}
	return kept[:p.limit], true, nil
}
