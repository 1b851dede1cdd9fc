package main

import "testing"

func TestFilter(t *testing.T) {
	for _, tc := range []struct {
		field, value string
		whitelist    []string
		in, out      string // out "" = not copied
		err          bool
	}{
		{"type", "", nil, `{"type":"a","x":1}`, `{"type":"a","x":1}`, false},
		{"type", "", nil, `{"x":1}`, "", false},
		{"type", "keep", nil, `{"type":"keep"}`, `{"type":"keep"}`, false},
		{"type", "keep", nil, `{"type":"drop"}`, "", false},
		{"type", "keep", nil, `{"other":"keep"}`, "", false},
		{"n", "42", nil, `{"n":42.0}`, `{"n":42.0}`, false},
		{"n", "42", nil, `{"n":"42"}`, `{"n":"42"}`, false},
		{"n", "42", nil, `{"n":43}`, "", false},
		{"ok", "true", nil, `{"ok":true}`, `{"ok":true}`, false},
		{"", "", []string{"id", "big"}, `{"id":7,"big":12345678901234567890,"secret":"s"}`, `{"big":12345678901234567890,"id":7}`, false},
		{"type", "", []string{"id"}, `{"type":"a","id":"x"}`, `{"id":"x"}`, false},
		{"type", "", nil, `not json`, "", true},
		{"type", "", nil, `{"type":1} trailing`, "", true},
		{"type", "", nil, `[1,2]`, "", true},
	} {
		f := newFilter(tc.field, tc.value, tc.whitelist)
		out, pass, err := f.apply([]byte(tc.in))
		if (err != nil) != tc.err || pass != (tc.out != "") || (pass && string(out) != tc.out) {
			t.Errorf("%s=%q %v on %s: got %s, %v, %v; want %q", tc.field, tc.value, tc.whitelist, tc.in, out, pass, err, tc.out)
		}
	}
	if newFilter("", "", nil) != nil {
		t.Error("filter without options")
	}
}
