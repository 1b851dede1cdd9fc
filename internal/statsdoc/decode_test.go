package statsdoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// fill sets every field reachable from v to a value of its own (slices
// get two elements, pointers a target), so that a field the decoders
// treat differently shows up as a difference.
func fill(v reflect.Value, seed *int) {
	*seed++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), seed)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), seed)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), seed)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, seed)
		fill(e, seed)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *seed))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*seed))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*seed))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*seed) + 0.5)
	}
}

// TestReadDecodesAsEncodingJSON: Decode and Unmarshal give what encoding/json gives, for
// a document with every field set, for one with keys in another case,
// keys it does not know and trailing whitespace, as an older or newer
// nsqd might answer, and for one with a name twice and invalid UTF-8 in
// a queue's name (a document from a daemon that lets either through).
func TestReadDecodesAsEncodingJSON(t *testing.T) {
	var full Doc
	seed := 0
	fill(reflect.ValueOf(&full).Elem(), &seed)
	doc, err := json.Marshal(&full)
	if err != nil {
		t.Fatal(err)
	}
	odd := []byte(`{"VERSION":"1.3.0","Health":"OK","topics":[{"topic_name":"t","new_key":{"a":[1,2]},` +
		`"channels":[{"channel_name":"c","depth":3,"clients":null}],"paused":true}],"start_time":7,"unknown":1}` + "\n\t ")
	lax := []byte(`{"health":"OK","health":"NOK - disk","topics":[{"topic_name":"t` + "\xff\xfe" + `","depth":1,"depth":2}]}`)
	for name, in := range map[string][]byte{"every field set": doc, "odd keys": odd, "duplicate names, invalid UTF-8": lax} {
		var want, got, gotRead Doc
		if err := json.Unmarshal(in, &want); err != nil {
			t.Fatalf("%s: encoding/json: %v", name, err)
		}
		if err := Unmarshal(in, &got); err != nil {
			t.Fatalf("%s: Unmarshal: %v", name, err)
		}
		if err := new(Decoder).Decode(bytes.NewReader(in), &gotRead); err != nil {
			t.Fatalf("%s: Decode: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotRead, want) {
			t.Errorf("%s: decoded\n%+v\nencoding/json decoded\n%+v", name, got, want)
		}
	}
	if !reflect.DeepEqual(full, mustUnmarshal(t, doc)) {
		t.Errorf("a full document does not survive encoding/json and Unmarshal")
	}
}

func mustUnmarshal(t *testing.T, b []byte) Doc {
	t.Helper()
	var d Doc
	if err := Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestReadRefusesWhatEncodingJSONRefuses: a truncated or mistyped answer
// is an error, not a partial document taken for a whole one, and so is
// an answer cut off by the connection.
func TestReadRefusesWhatEncodingJSONRefuses(t *testing.T) {
	var dec Decoder
	for _, in := range []string{`{"topics":[{"topic_name":"t"`, `{"topics":{}}`, `{"start_time":"x"}`, ``} {
		var d Doc
		if err := dec.Decode(bytes.NewReader([]byte(in)), &d); err == nil {
			t.Errorf("Decode(%q) = nil error", in)
		}
	}
	cut := io.MultiReader(strings.NewReader(`{"topics":[]}`), iotest.ErrReader(io.ErrUnexpectedEOF))
	var d Doc
	if err := dec.Decode(cut, &d); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Decode of a broken connection: %v, want io.ErrUnexpectedEOF", err)
	}
}

// TestDecoderReusesBuffers: answers decoded one after another and at
// once through one Decoder each decode alone (a kept buffer starts
// empty), and the Decoder keeps no more buffers than it may.
func TestDecoderReusesBuffers(t *testing.T) {
	var dec Decoder
	long := `{"version":"1.3.0","topics":[{"topic_name":"` + strings.Repeat("x", 5000) + `"}]}`
	short := `{"health":"OK"}`
	var wg sync.WaitGroup
	for g := range 2 * keptBuffers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				in, want := short, Doc{Health: "OK"}
				if (g+i)%2 == 0 {
					in, want = long, Doc{Version: "1.3.0", Topics: []Topic{{TopicName: strings.Repeat("x", 5000)}}}
				}
				var got Doc
				if err := dec.Decode(strings.NewReader(in), &got); err != nil {
					t.Error(err)
					return
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("decoded %.80v, want %.80v", got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := len(dec.free); n == 0 || n > keptBuffers {
		t.Errorf("the Decoder keeps %d buffers, want 1 to %d", n, keptBuffers)
	}
}

// BenchmarkDecodeStats decodes a /stats document of 2,000 topics × 2
// channels (about NSQ's size for it): a Decoder against encoding/json and
// against json v2 decoding the stream with encoding/json's leniency.
func BenchmarkDecodeStats(b *testing.B) {
	var d Doc
	d.Version, d.Health = "1.3.0", "OK"
	for i := range 2000 {
		tp := Topic{TopicName: fmt.Sprintf("stats%d", i), Depth: int64(i)}
		for c := range 2 {
			tp.Channels = append(tp.Channels, Channel{ChannelName: fmt.Sprintf("ch%d", c), Depth: int64(c)})
		}
		d.Topics = append(d.Topics, tp)
	}
	doc, err := json.Marshal(&d)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Decoder", func(b *testing.B) {
		var dec Decoder
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			var out Doc
			if err := dec.Decode(bytes.NewReader(doc), &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json v2", func(b *testing.B) {
		lenient := jsonv2.JoinOptions(jsonv2.MatchCaseInsensitiveNames(true),
			jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			var out Doc
			if err := jsonv2.UnmarshalRead(bytes.NewReader(doc), &out, lenient); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			var out Doc
			if err := json.NewDecoder(bytes.NewReader(doc)).Decode(&out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
