package main

import (
	"slices"
	"strings"
	"testing"
)

// The stats scenario's check of each answer: valid JSON with exactly the
// topics and channels created, or an error.
func TestCheckStatsCount(t *testing.T) {
	doc := `{"topics":[{"topic_name":"a","channels":[{"channel_name":"c0"},{"channel_name":"c1"}]},` +
		`{"topic_name":"b","channels":[{"channel_name":"c0"},{"channel_name":"c1"}]}],"producers":null}`
	if err := checkStatsCount([]byte(doc), 2, 4); err != nil {
		t.Fatalf("2 topics × 2 channels: %v", err)
	}
	if err := checkStatsCount([]byte(doc), 2, 5); err == nil || !strings.Contains(err.Error(), "4 channels, want 2 and 5") {
		t.Fatalf("a missing channel: %v", err)
	}
	if err := checkStatsCount([]byte(doc[:len(doc)-1]), 2, 4); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("a cut answer: %v", err)
	}
}

// latency and spread run only when asked for; every other scenario runs
// by default.
func TestDefaultScenarios(t *testing.T) {
	cfg := defaultConfig()
	optional := []string{"latency", "spread"}
	if slices.ContainsFunc(cfg.scenarios, func(s string) bool { return slices.Contains(optional, s) }) ||
		len(cfg.scenarios) != len(scenarios)-len(optional) {
		t.Fatalf("default scenarios %v, want all but %v", cfg.scenarios, optional)
	}
	for _, name := range optional {
		cfg.scenarios = []string{name}
		if err := cfg.validate(); err != nil {
			t.Fatalf("%s by name: %v", name, err)
		}
	}
}
