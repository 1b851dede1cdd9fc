package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// filter implements --require-json-field/--require-json-value and
// --whitelist-json-field over JSON object messages.
type filter struct {
	requireField string
	requireValue string
	isNumber     bool // requireValue parses as a number
	number       float64
	whitelist    []string
}

// newFilter returns nil when no JSON option is set.
func newFilter(field, value string, whitelist []string) *filter {
	if field == "" && len(whitelist) == 0 {
		return nil
	}
	f := &filter{requireField: field, requireValue: value, whitelist: whitelist}
	if n, err := strconv.ParseFloat(value, 64); err == nil {
		f.isNumber, f.number = true, n
	}
	return f
}

// apply returns the body to copy and whether to copy it at all. A body that
// is not a JSON object is an error (the message is dropped, as in NSQ).
func (f *filter) apply(body []byte) ([]byte, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // keep numbers exactly as sent
	var js map[string]any
	if err := dec.Decode(&js); err != nil || js == nil || dec.Decode(new(any)) != io.EOF {
		return nil, false, fmt.Errorf("unable to decode JSON object: %.64q", body)
	}
	if !f.pass(js) {
		return nil, false, nil
	}
	if len(f.whitelist) == 0 {
		return body, true, nil
	}
	out := make(map[string]any, len(f.whitelist))
	for _, k := range f.whitelist {
		if v, ok := js[k]; ok {
			out[k] = v
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, false, fmt.Errorf("re-encoding filtered message: %w", err)
	}
	return b, true, nil
}

// pass applies --require-json-field/value. A number field matches a
// numeric value by number (1 matches 1.0), a string by text, a boolean by
// "true"/"false".
func (f *filter) pass(js map[string]any) bool {
	if f.requireField == "" {
		return true
	}
	v, ok := js[f.requireField]
	if !ok {
		return false
	}
	if f.requireValue == "" {
		return true
	}
	switch v := v.(type) {
	case json.Number:
		n, err := v.Float64()
		return f.isNumber && err == nil && n == f.number
	case string:
		return v == f.requireValue
	case bool:
		return strconv.FormatBool(v) == f.requireValue
	}
	return false
}
