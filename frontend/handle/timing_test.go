package handle

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestConstantTimeCompare checks, on the source, that signatures are compared
// only with hmac.Equal, inside verifyMAC, and that open calls verifyMAC.
func TestConstantTimeCompare(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatal("no source files found")
	}
	var hmacEqualIn, verifyCalledIn []string
	{
		for _, file := range files {
			for _, decl := range file.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok {
					continue
				}
				ast.Inspect(fn, func(n ast.Node) bool {
					switch n := n.(type) {
					case *ast.SelectorExpr:
						if x, ok := n.X.(*ast.Ident); ok {
							switch x.Name + "." + n.Sel.Name {
							case "hmac.Equal":
								hmacEqualIn = append(hmacEqualIn, fn.Name.Name)
							case "bytes.Equal", "bytes.Compare", "reflect.DeepEqual", "slices.Equal", "strings.Compare", "strings.EqualFold":
								t.Errorf("%s: %s.%s used in %s; compare MACs with hmac.Equal", fset.Position(n.Pos()), x.Name, n.Sel.Name, fn.Name.Name)
							}
						}
					case *ast.CallExpr:
						if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "verifyMAC" {
							verifyCalledIn = append(verifyCalledIn, fn.Name.Name)
						}
					case *ast.BinaryExpr:
						if n.Op == token.EQL || n.Op == token.NEQ {
							for _, side := range []ast.Expr{n.X, n.Y} {
								name := rootIdent(side)
								if strings.HasSuffix(name, "Len") { // a length constant, not contents
									continue
								}
								if strings.Contains(strings.ToLower(name), "sig") || strings.Contains(strings.ToLower(name), "mac") {
									t.Errorf("%s: %s compared with %s in %s", fset.Position(n.Pos()), name, n.Op, fn.Name.Name)
								}
							}
						}
					}
					return true
				})
			}
		}
	}
	// openAEAD compares an encrypted string's synthetic nonce (after GCM, which checks its tag
	// in constant time itself); OpenManifest checks a manifest seal (manifest.go), whose key is
	// HKDF-derived, so it cannot go through verifyMAC.
	if fmt.Sprint(hmacEqualIn) != "[openAEAD verifyMAC OpenManifest]" {
		t.Errorf("hmac.Equal used in %v, want only in OpenManifest, openAEAD and verifyMAC", hmacEqualIn)
	}
	if fmt.Sprint(verifyCalledIn) != "[open]" {
		t.Errorf("verifyMAC called from %v, want only from open", verifyCalledIn)
	}
}

// rootIdent names the identifier an operand is (or converts), ignoring
// calls such as len(sig), which compare lengths, not contents.
func rootIdent(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.ParenExpr:
		return rootIdent(e.X)
	case *ast.SliceExpr:
		return rootIdent(e.X)
	case *ast.IndexExpr:
		return rootIdent(e.X)
	case *ast.CallExpr: // conversions like string(sig)
		if id, ok := e.Fun.(*ast.Ident); ok && (id.Name == "string" || id.Name == "[]byte") && len(e.Args) == 1 {
			return rootIdent(e.Args[0])
		}
	}
	return ""
}

func TestConcurrentUse(t *testing.T) {
	ring := testRing(t)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				h := testHandle()
				h.WorkflowID = fmt.Sprintf("acme/eval/%d-%d", g, i)
				got, err := ring.OpenHandle(ring.SealHandle(h), testNow)
				if err != nil || got.WorkflowID != h.WorkflowID {
					t.Errorf("%+v, %v", got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func BenchmarkSealHandle(b *testing.B) {
	ring, h := testRing(b), testHandle()
	b.ReportAllocs()
	for b.Loop() {
		if ring.SealHandle(h) == "" {
			b.Fatal("seal failed")
		}
	}
}

func BenchmarkOpenHandle(b *testing.B) {
	ring := testRing(b)
	s := ring.SealHandle(testHandle())
	b.ReportAllocs()
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if _, err := ring.OpenHandle(s, testNow); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenHandleBadSig is the cost of rejecting a forged handle.
func BenchmarkOpenHandleBadSig(b *testing.B) {
	ring := testRing(b)
	s := []byte(ring.SealHandle(testHandle()))
	s[len(s)-5] ^= 1
	bad := string(s)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ring.OpenHandle(bad, testNow); err == nil {
			b.Fatal("opened")
		}
	}
}

func BenchmarkSealCursor(b *testing.B) {
	ring, c := testRing(b), testCursor()
	b.ReportAllocs()
	for b.Loop() {
		if ring.SealCursor(c) == "" {
			b.Fatal("seal failed")
		}
	}
}

func BenchmarkOpenCursor(b *testing.B) {
	ring := testRing(b)
	s := ring.SealCursor(testCursor())
	b.ReportAllocs()
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if _, err := ring.OpenCursor(s, testNow); err != nil {
			b.Fatal(err)
		}
	}
}
