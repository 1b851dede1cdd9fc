package names

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	cases := []struct {
		name string
		want bool
	}{
		{"orders", true},
		{"a.b-c_D9", true},
		{"tail#ephemeral", true},
		{"#ephemeral", false},
		{"", false},
		{"x!", false},
		{"sp ace", false},
		{"a#ephemeral#ephemeral", false},
		{"a#eph", false},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{strings.Repeat("a", 54) + EphemeralSuffix, true},
		{strings.Repeat("a", 55) + EphemeralSuffix, false},
	}
	for _, c := range cases {
		if got := Valid(c.name); got != c.want {
			t.Errorf("Valid(%q) = %v, want %v", c.name, got, c.want)
		}
	}
	if !IsEphemeral("x#ephemeral") || IsEphemeral("x") {
		t.Fatal("IsEphemeral misclassifies")
	}
}
