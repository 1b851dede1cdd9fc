package nsqd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Start removes what a crash left: nsqd.dat and policies tmp files of an
// interrupted metadata write, a disk queue's interrupted delete (whole queue gone),
// files of a delete whose removal was cut short, and disk queue metadata
// tmp files; nothing else.
func TestStartRemovesCrashLeftovers(t *testing.T) {
	o := testOptions(t)
	dir := o.DataPath
	leftovers := []string{
		"nsqd.dat.5577006791947779410.tmp",
		"nsqd.policies.json.8674665223082153551.tmp",
		"gone:ch.diskqueue.deleting",          // delete interrupted...
		"gone:ch.diskqueue.000003.dat",        // ...before this was renamed
		"deleted~1f~old.diskqueue.000000.dat", // removal cut short
		"t.diskqueue.meta.dat.42.tmp",
	}
	keep := []string{"nsqd.dat.backup", "t.diskqueue.000000.dat.bad", "notes.txt", "nsqd.policies.json.bak"}
	for _, f := range append(append([]string{}, leftovers...), keep...) {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := startDaemon(t, o)
	d.stop()
	for _, f := range leftovers {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s was not removed", f)
		}
	}
	for _, f := range keep {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s was removed: %v", f, err)
		}
	}
}

// FuzzMetadataParse: nsqd.dat parsing never panics; bad input is an error
// that names the file; what parses survives a round trip.
func FuzzMetadataParse(f *testing.F) {
	f.Add([]byte(`{"topics":[{"channels":[{"name":"c","paused":false}],"name":"t","paused":true}],"version":"1.3.0"}`))
	f.Add([]byte(`{"topics":[{"name":"t","paused":false,"channels":null}],"version":"1.3.0"}`))
	f.Add([]byte(``))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"topics":{}}`))
	f.Add([]byte(`{"topics":[{"name":123}]}`))
	f.Add([]byte("{\"topics\":[{\"name\":\"\xff\"}]}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMetadata(b)
		if err != nil {
			if !strings.Contains(err.Error(), metadataFile) {
				t.Fatalf("error does not name %s: %v", metadataFile, err)
			}
			return
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		m2, err := parseMetadata(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		if len(m2.Topics) != len(m.Topics) {
			t.Fatalf("round trip changed the topics: %d -> %d", len(m.Topics), len(m2.Topics))
		}
	})
}
