package httpapi

import (
	"net/http"
	"net/url"
)

// Query parses the request's URL query as NSQ's daemons do: a malformed
// one is 400 INVALID_REQUEST rather than silently dropped pairs.
func Query(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, Err{Code: http.StatusBadRequest, Text: "INVALID_REQUEST"}
	}
	return q, nil
}

// Param returns the first value of key and whether key is present at
// all: NSQ tells a missing argument ("MISSING_ARG_…") from an empty one
// (which then fails validation or lookup).
func Param(q url.Values, key string) (string, bool) {
	v, ok := q[key]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[0], true
}
