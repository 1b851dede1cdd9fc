package lookupd

import (
	"encoding/json"
	"testing"
	"time"
)

// TestAppendLookupJSONMatchesEncoding checks the hand-built /lookup answer
// against encoding/json applied to Lookup's result, filters included.
func TestAppendLookupJSONMatchesEncoding(t *testing.T) {
	db := NewRegistrationDB()
	p1, p2, p3 := testPeer("p1", 1), testPeer("p2", 2), testPeer("p3", 3)
	ta := Registration{"topic", "a", ""}
	for _, p := range []*Peer{p3, p1, p2} {
		db.AddProducer(ta, p)
	}
	db.AddProducer(Registration{"channel", "a", "z"}, p1)
	db.AddRegistration(Registration{"channel", "a", "b#ephemeral"})
	// Not a valid name, but the DB is a library: the output must still be JSON.
	db.AddRegistration(Registration{"channel", "a", "q\"<é>\\"})
	db.AddRegistration(Registration{"topic", "empty", ""})
	db.TombstoneProducers(ta, func(p PeerInfo) bool { return p.HTTPPort == 2 }, t0)
	p3.Touch(t0.Add(-time.Hour))

	f := ActiveFilter{Now: t0.Add(time.Second), InactiveTimeout: time.Minute, TombstoneLifetime: time.Minute}
	for _, topic := range []string{"a", "empty", "missing"} {
		got, ok := db.AppendLookupJSON([]byte("prefix"), topic, f)
		channels, producers, ok2 := db.Lookup(topic, f)
		if ok != ok2 {
			t.Fatalf("%s: ok %v vs %v", topic, ok, ok2)
		}
		if !ok {
			if string(got) != "prefix" {
				t.Errorf("%s: appended %q for a missing topic", topic, got)
			}
			continue
		}
		want, err := json.Marshal(struct {
			Channels  []string   `json:"channels"`
			Producers []PeerInfo `json:"producers"`
		}{channels, producers})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "prefix"+string(want) {
			t.Errorf("%s:\n got %s\nwant prefix%s", topic, got, want)
		}
	}
	if _, producers, _ := db.Lookup("a", f); len(producers) != 1 || producers[0].RemoteAddress != "p1" {
		t.Errorf("filters: producers = %+v, want only p1", producers)
	}
}
