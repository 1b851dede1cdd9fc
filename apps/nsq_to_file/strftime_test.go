package main

import (
	"testing"
	"time"
)

func TestStrftime(t *testing.T) {
	tm := time.Date(2024, 3, 7, 5, 4, 9, 0, time.UTC)
	for format, want := range map[string]string{
		"%Y-%m-%d_%H":        "2024-03-07_05",
		"%Y%m%d%H%M%S":       "20240307050409",
		"%y/%j %% %q trail%": "24/067 % %q trail%",
		"":                   "",
	} {
		if got := strftime(format, tm); got != want {
			t.Errorf("strftime(%q) = %q, want %q", format, got, want)
		}
	}
}
