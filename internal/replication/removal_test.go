package replication

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestLeaveRemoved: a node with no record of a removal starts as it is; a
// removed one stays out, unless it is started with a member to join,
// when its old cluster state goes.
func TestLeaveRemoved(t *testing.T) {
	start := func(t *testing.T, marked bool, join string) (Config, bool) {
		t.Helper()
		cfg := Config{DataDir: t.TempDir(), Join: join, Log: slog.New(slog.DiscardHandler)}
		if err := os.WriteFile(filepath.Join(cfg.DataDir, "raft.db"), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		if marked {
			if err := os.WriteFile(filepath.Join(cfg.DataDir, removedFile), []byte("then\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		removed, err := leaveRemoved(&cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cfg, removed
	}
	exists := func(cfg Config, name string) bool {
		_, err := os.Stat(filepath.Join(cfg.DataDir, name))
		return err == nil
	}

	if cfg, removed := start(t, false, "127.0.0.1:1"); removed || !exists(cfg, "raft.db") {
		t.Fatalf("never removed: removed %v, state kept %v; want false, true", removed, exists(cfg, "raft.db"))
	}
	if cfg, removed := start(t, true, ""); !removed || !exists(cfg, "raft.db") || !exists(cfg, removedFile) {
		t.Fatalf("removed, no join: removed %v, state kept %v; want true, true", removed, exists(cfg, "raft.db"))
	}
	cfg, removed := start(t, true, "127.0.0.1:1")
	if removed || exists(cfg, "raft.db") || exists(cfg, removedFile) {
		t.Fatalf("removed, joining: removed %v, old state kept %v, record kept %v; want all false",
			removed, exists(cfg, "raft.db"), exists(cfg, removedFile))
	}
	if fi, err := os.Stat(cfg.DataDir); err != nil || !fi.IsDir() {
		t.Fatalf("the data dir after dropping the old state: %v", err)
	}
}
