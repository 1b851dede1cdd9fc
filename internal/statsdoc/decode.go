package statsdoc

import (
	"io"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Read decodes the JSON value that r holds into v (a Doc, or any other of
// nsqd's and nsqlookupd's answers) as leniently as encoding/json does:
// names matched regardless of case, embedded structs inlined, unknown keys
// ignored, duplicate names and invalid UTF-8 taken. The decoder is json
// v2's, because a /stats document is megabytes with thousands of queues
// and nsqadmin decodes one per node for every page: encoding/json takes
// about three times as long (BenchmarkDecodeStats), several times what
// the daemon takes to answer.
func Read(r io.Reader, v any) error {
	return jsonv2.UnmarshalRead(r, v, lenient)
}

// Unmarshal is Read of data.
func Unmarshal(data []byte, v any) error {
	return jsonv2.Unmarshal(data, v, lenient)
}

// lenient is encoding/json's leniency, as json v2 options.
var lenient = jsonv2.JoinOptions(
	jsonv2.MatchCaseInsensitiveNames(true),
	jsontext.AllowDuplicateNames(true),
	jsontext.AllowInvalidUTF8(true),
)
