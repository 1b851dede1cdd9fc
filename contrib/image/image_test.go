// Package image holds the test of the project's container image
// (Containerfile, `make image`); it has no code of its own.
package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// binaries are what the image holds at its root, as NSQ's does.
var binaries = []string{"nsqd", "nsqlookupd", "nsqadmin", "nsq_stat", "nsq_tail", "nsq_to_file", "nsq_to_http", "nsq_to_nsq", "to_nsq"}

// TestImage builds the image with `make image` and checks it is laid out as
// NSQ's: its config (the NSQ ports exposed, /data the volume and working
// directory, nothing run by default), and every binary at the root, static,
// answering --version. The binaries are run from the image's exported
// filesystem rather than in a container: they are static, and a container
// runtime needs privileges a test machine may not grant.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image")
	}
	tool := ""
	for _, name := range []string{"podman", "buildah"} {
		if _, err := exec.LookPath(name); err == nil {
			tool = name
			break
		}
	}
	if tool == "" {
		t.Skip("needs podman or buildah (Debian: apt-get install buildah); .ci/run installs podman")
	}
	tag := fmt.Sprintf("localhost/nsqgo/nsq:test-%d", os.Getpid())
	run(t, "../..", "make", "image", "IMAGE="+tag)
	t.Cleanup(func() { _ = exec.Command(tool, "rmi", "-f", tag).Run() })

	var cfg struct {
		ExposedPorts map[string]struct{}
		Volumes      map[string]struct{}
		WorkingDir   string
		Entrypoint   []string
		Cmd          []string
	}
	format := "{{json .Config}}"
	if tool == "buildah" {
		format = "{{json .OCIv1.Config}}"
	}
	if err := json.Unmarshal(run(t, ".", tool, "inspect", "--format", format, tag), &cfg); err != nil {
		t.Fatalf("image config: %v", err)
	}
	var ports []string
	for p := range cfg.ExposedPorts {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	if want := []string{"4150/tcp", "4151/tcp", "4160/tcp", "4161/tcp", "4170/tcp", "4171/tcp"}; !slices.Equal(ports, want) {
		t.Errorf("exposed ports %v, want %v", ports, want)
	}
	if _, ok := cfg.Volumes["/data"]; !ok || len(cfg.Volumes) != 1 || cfg.WorkingDir != "/data" {
		t.Errorf("volumes %v, working dir %q; want /data for both", cfg.Volumes, cfg.WorkingDir)
	}
	if len(cfg.Entrypoint) != 0 || len(cfg.Cmd) != 0 {
		t.Errorf("entrypoint %v, cmd %v; want none (the binary is named by the run, as in NSQ's image)", cfg.Entrypoint, cfg.Cmd)
	}

	root := exportImage(t, tool, tag)
	for _, name := range binaries {
		bin := filepath.Join(root, name)
		f, err := elf.Open(bin)
		if err != nil {
			t.Errorf("/%s: %v", name, err)
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("/%s is dynamically linked", name)
			}
		}
		f.Close()
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), name+" v") {
			t.Errorf("/%s --version: %v %q", name, err, out)
		}
	}
}

// exportImage writes the filesystem of a container made from tag (never
// started) to a temporary directory.
func exportImage(t *testing.T, tool, tag string) string {
	t.Helper()
	var ctr string
	var archive []byte
	if tool == "podman" {
		ctr = strings.TrimSpace(string(run(t, ".", "podman", "create", tag, "/nsqd")))
		t.Cleanup(func() { _ = exec.Command("podman", "rm", "-f", ctr).Run() })
		archive = run(t, ".", "podman", "export", ctr)
	} else {
		ctr = strings.TrimSpace(string(run(t, ".", "buildah", "from", tag)))
		t.Cleanup(func() { _ = exec.Command("buildah", "rm", ctr).Run() })
		mnt := strings.TrimSpace(string(run(t, ".", "buildah", "mount", ctr)))
		archive = run(t, mnt, "tar", "-cf", "-", ".")
	}
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dir
		}
		if err != nil {
			t.Fatalf("reading the image's filesystem: %v", err)
		}
		name := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			_ = os.MkdirAll(name, 0o755)
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(name, b, os.FileMode(h.Mode)&0o777); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// run runs a command in dir and returns its standard output, failing the
// test if it fails.
func run(t *testing.T, dir, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return out
}
