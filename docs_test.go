// Package nsq holds the repository-wide checks that belong to no daemon:
// the documentation's links.
package nsq

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinksResolve checks that every relative link in README.md and
// docs/*.md leads to a file of this repository and, with a #fragment, to a
// heading of the Markdown file it names, as GitHub renders them.
func TestDocLinksResolve(t *testing.T) {
	files, err := docFiles(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %v: want README.md and the docs/*.md pages", files)
	}
	for _, problem := range brokenLinks(".", files) {
		t.Error(problem)
	}
}

// TestBrokenLinksAreReported runs the checker over a small tree with one
// link of each kind, so that TestDocLinksResolve passing means something.
func TestBrokenLinksAreReported(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "README.md"), strings.Join([]string{
		"# Intro",
		"[ok](docs/a.md) [ok](docs/a.md#the-disk-queue-internaldiskqueue-not-go-diskqueue)",
		"[ok](#intro) [ok](docs/) [ok](https://example.com/missing.md) [ok][ref]",
		"`[in code](nowhere.md)`",
		"```",
		"[in a fence](nowhere.md)",
		"```",
		"[missing](docs/b.md) [bad anchor](docs/a.md#nope) [outside](../x.md) [self](#nope)",
		"[bad ref][bad]",
		"",
		"[ref]: docs/a.md#limits-1",
		"[bad]: nowhere.md",
	}, "\n"))
	writeFile(t, filepath.Join(root, "docs", "a.md"), strings.Join([]string{
		"# The disk queue: internal/diskqueue, not go-diskqueue",
		"## Limits",
		"## Limits",
	}, "\n"))
	got := brokenLinks(root, []string{"README.md", filepath.Join("docs", "a.md")})
	want := []string{
		`README.md:8: link "docs/b.md": no such file`,
		`README.md:8: link "docs/a.md#nope": docs/a.md has no heading with anchor "nope"`,
		`README.md:8: link "../x.md": leaves the repository`,
		`README.md:8: link "#nope": README.md has no heading with anchor "nope"`,
		`README.md:12: link "nowhere.md": no such file`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestGitHubAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Differences from NSQ v1.3.0, on the wire":             "differences-from-nsq-v130-on-the-wire",
		"The disk queue: internal/diskqueue, not go-diskqueue": "the-disk-queue-internaldiskqueue-not-go-diskqueue",
		"Side by side with NSQ v1.3.0: `make bench-compare`":   "side-by-side-with-nsq-v130-make-bench-compare",
		"**`/stats`** and [peek](x.md)":                        "stats-and-peek",
		"nsqlookupd: TCP protocol V1 and its HTTP API":         "nsqlookupd-tcp-protocol-v1-and-its-http-api",
		"max_age — expiry":                                     "max_age--expiry",
	} {
		if got := githubAnchor(heading); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// docFiles lists README.md and docs/*.md under root, relative to it.
func docFiles(root string) ([]string, error) {
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, fmt.Errorf("listing docs: %w", err)
	}
	files := []string{"README.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return nil, fmt.Errorf("listing docs: %w", err)
		}
		files = append(files, rel)
	}
	return files, nil
}

// brokenLinks checks the relative links of files (relative to root) and
// returns one line per broken link: "file:line: link "target": why".
func brokenLinks(root string, files []string) []string {
	var problems []string
	anchors := map[string]map[string]bool{} // by file relative to root
	anchorsOf := func(rel string) (map[string]bool, error) {
		if a, ok := anchors[rel]; ok {
			return a, nil
		}
		src, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return nil, err
		}
		a := scanMarkdown(string(src)).anchors
		anchors[rel] = a
		return a, nil
	}
	for _, file := range files {
		src, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", file, err))
			continue
		}
		for _, l := range scanMarkdown(string(src)).links {
			if why := checkLink(root, file, l.target, anchorsOf); why != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: link %q: %s", file, l.line, l.target, why))
			}
		}
	}
	return problems
}

var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// checkLink says why target, a link in file, does not resolve, or "" when
// it does or is not relative (it has a scheme).
func checkLink(root, file, target string, anchorsOf func(string) (map[string]bool, error)) string {
	if schemeRE.MatchString(target) || strings.HasPrefix(target, "//") {
		return ""
	}
	path, fragment, _ := strings.Cut(target, "#")
	path, err := url.PathUnescape(path)
	if err != nil {
		return fmt.Sprintf("bad escape: %v", err)
	}
	if fragment, err = url.PathUnescape(fragment); err != nil {
		return fmt.Sprintf("bad escape: %v", err)
	}
	rel := file
	if path != "" {
		base := filepath.Dir(file)
		if strings.HasPrefix(path, "/") { // GitHub: from the repository's root
			base = ""
		}
		rel = filepath.Clean(filepath.Join(base, filepath.FromSlash(path)))
		if rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "leaves the repository"
		}
		if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
			return "no such file"
		}
	}
	if fragment == "" {
		return ""
	}
	if !strings.HasSuffix(rel, ".md") {
		return fmt.Sprintf("an anchor into %s, which is not Markdown", filepath.ToSlash(rel))
	}
	anchors, err := anchorsOf(rel)
	if err != nil {
		return err.Error()
	}
	if !anchors[fragment] {
		return fmt.Sprintf("%s has no heading with anchor %q", filepath.ToSlash(rel), fragment)
	}
	return ""
}

type mdLink struct {
	line   int
	target string
}

type mdScan struct {
	links   []mdLink
	anchors map[string]bool
}

var (
	fenceRE     = regexp.MustCompile("^ {0,3}(```|~~~)")
	atxRE       = regexp.MustCompile(`^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)
	setextRE    = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	inlineRE    = regexp.MustCompile(`\]\([ \t]*<?([^()\s<>]*)>?(?:[ \t]+"[^"]*")?[ \t]*\)`)
	refDefRE    = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:[ \t]*<?([^\s<>]+)>?`)
	htmlIDRE    = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	mdLinkRE    = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTagRE   = regexp.MustCompile(`<[^>]+>`)
	backtickRE  = regexp.MustCompile("`+")
	emphasisRE  = regexp.MustCompile(`\*+`)
	listStartRE = regexp.MustCompile(`^\s*([-*+]|\d+[.)])\s`)
)

// scanMarkdown finds the link targets of src outside code, and the anchors
// GitHub gives its headings (and explicit <a name/id> tags).
func scanMarkdown(src string) mdScan {
	scan := mdScan{anchors: map[string]bool{}}
	seen := map[string]int{}
	addHeading := func(text string) {
		a := githubAnchor(text)
		if n := seen[a]; n > 0 {
			scan.anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			scan.anchors[a] = true
		}
		seen[a]++
	}
	inFence, prev := false, ""
	for i, line := range strings.Split(src, "\n") {
		if fenceRE.MatchString(line) {
			inFence, prev = !inFence, ""
			continue
		}
		if inFence {
			continue
		}
		if m := atxRE.FindStringSubmatch(line); m != nil {
			addHeading(m[1])
		} else if setextRE.MatchString(line) && isParagraphLine(prev) {
			addHeading(strings.TrimSpace(prev))
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(line, -1) {
			scan.anchors[m[1]] = true
		}
		text := stripCodeSpans(line)
		for _, m := range inlineRE.FindAllStringSubmatch(text, -1) {
			scan.links = append(scan.links, mdLink{line: i + 1, target: m[1]})
		}
		if m := refDefRE.FindStringSubmatch(text); m != nil {
			scan.links = append(scan.links, mdLink{line: i + 1, target: m[1]})
		}
		prev = line
	}
	return scan
}

// isParagraphLine says whether line can be the text of a setext heading.
func isParagraphLine(line string) bool {
	t := strings.TrimSpace(line)
	return t != "" && !strings.HasPrefix(t, "#") && !strings.HasPrefix(t, "|") &&
		!strings.HasPrefix(t, ">") && !listStartRE.MatchString(line) && !setextRE.MatchString(line)
}

// stripCodeSpans blanks inline code, where brackets are not links.
func stripCodeSpans(line string) string {
	var b strings.Builder
	for {
		start := strings.IndexByte(line, '`')
		if start < 0 {
			b.WriteString(line)
			return b.String()
		}
		n := start
		for n < len(line) && line[n] == '`' {
			n++
		}
		ticks := line[start:n]
		end := strings.Index(line[n:], ticks)
		if end < 0 { // an unclosed run of backticks is literal text
			b.WriteString(line[:n])
			line = line[n:]
			continue
		}
		b.WriteString(line[:start])
		line = line[n+end+len(ticks):]
	}
}

// githubAnchor is the fragment GitHub gives a heading: its text as
// rendered, lower-cased, without punctuation but hyphens and underscores,
// spaces turned into hyphens.
func githubAnchor(heading string) string {
	text := mdLinkRE.ReplaceAllString(heading, "$1")
	text = htmlTagRE.ReplaceAllString(text, "")
	text = backtickRE.ReplaceAllString(text, "")
	text = emphasisRE.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
