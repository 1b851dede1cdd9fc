package nsqd

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// seamFiles are the files of this package that may reach the replication
// layer: the cluster adapter itself, nsqd.go, where a topic name resolves
// to this node's own topic or a replicated one (publishTo, consumeFrom,
// statsTopics, the claim check in getTopic, start and stop), and http.go,
// which routes the cluster's HTTP calls.
var seamFiles = []string{"nsqd_cluster.go", "nsqd.go", "http.go"}

// TestReplicationSeam holds the core to its one seam: no other file of the
// package imports internal/replication or names anything the cluster
// adapter (nsqd_cluster.go) declares, or NSQD's repl field. A new entry
// point therefore cannot fork on replication by itself; it goes through
// publishTo or consumeFrom, which chose the topic's path already.
func TestReplicationSeam(t *testing.T) {
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files[p] = f
	}
	adapter := files["nsqd_cluster.go"]
	if adapter == nil {
		t.Fatal("nsqd_cluster.go is missing")
	}

	// What the adapter declares: top-level names, and the methods it adds
	// to the daemon's own types. Methods of its own types (clusterHost's,
	// which the replication layer calls) are reached only through those
	// types, which are in the set.
	names, methods := map[string]bool{}, map[string]bool{"repl": true}
	for _, d := range adapter.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				names[d.Name.Name] = true
			} else if r := receiverType(d.Recv); r == "NSQD" || r == "httpServer" {
				methods[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					names[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						names[n.Name] = true
					}
				}
			}
		}
	}
	if len(names) == 0 || len(methods) < 2 {
		t.Fatalf("found too little in nsqd_cluster.go: %v %v", names, methods)
	}

	var found []string
	for p, f := range files {
		if slices.Contains(seamFiles, p) {
			continue
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); strings.HasSuffix(path, "/internal/replication") {
				found = append(found, fset.Position(imp.Pos()).String()+": imports "+path)
			}
		}
		ast.Inspect(f, func(x ast.Node) bool {
			switch x := x.(type) {
			case *ast.SelectorExpr:
				if methods[x.Sel.Name] {
					found = append(found, fset.Position(x.Sel.Pos()).String()+": ."+x.Sel.Name)
				}
				ast.Inspect(x.X, func(y ast.Node) bool {
					if id, ok := y.(*ast.Ident); ok && names[id.Name] {
						found = append(found, fset.Position(id.Pos()).String()+": "+id.Name)
					}
					return true
				})
				return false
			case *ast.Ident:
				if names[x.Name] {
					found = append(found, fset.Position(x.Pos()).String()+": "+x.Name)
				}
			}
			return true
		})
	}
	sort.Strings(found)
	for _, f := range found {
		t.Errorf("%s reaches the replication layer outside %v", f, seamFiles)
	}
}

func receiverType(recv *ast.FieldList) string {
	if len(recv.List) == 0 {
		return ""
	}
	x := recv.List[0].Type
	if s, ok := x.(*ast.StarExpr); ok {
		x = s.X
	}
	if id, ok := x.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
