package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/devidp"
)

// TestCheckAccessTokenClock: a token issued by a clock far from this machine's, or expired
// long before it arrived, is refused with a message naming the clocks.
func TestCheckAccessTokenClock(t *testing.T) {
	isolate(t)
	p := startLoginIdP(t, devidp.Options{})
	tok := browserToken(t, p, "ana")
	now := time.Now()
	if _, err := checkAccessToken(tok, p.issuer, p.resource, "tenant", now); err != nil {
		t.Fatalf("a good token: %v", err)
	}
	for name, at := range map[string]time.Time{"machine behind": now.Add(-10 * time.Minute), "machine ahead": now.Add(2 * time.Hour)} {
		if _, err := checkAccessToken(tok, p.issuer, p.resource, "tenant", at); err == nil || !strings.Contains(err.Error(), "clock") {
			t.Errorf("%s: %v, want a clock error", name, err)
		}
	}
	if _, err := checkAccessToken(tok, p.issuer, "http://other/mcp", "tenant", now); err == nil || !strings.Contains(err.Error(), "lacks the resource http://other/mcp") {
		t.Errorf("other resource: %v", err)
	}
	if _, err := checkAccessToken(tok, "http://other/oidc", p.resource, "tenant", now); err == nil || !strings.Contains(err.Error(), "its iss is") {
		t.Errorf("other issuer: %v", err)
	}
	if _, err := checkAccessToken("opaque-token", p.issuer, p.resource, "tenant", now); err == nil || !strings.Contains(err.Error(), "opaque") {
		t.Errorf("opaque: %v", err)
	}
}

// TestTokenStoreFile: writes are atomic and private, an unreadable or foreign-readable store is
// refused with what to do, and commands find a login by URL or by resource.
func TestTokenStoreFile(t *testing.T) {
	store := isolate(t)
	tf := &tokenFile{}
	tf.put(storedLogin{Issuer: "https://a", Resource: "https://api.example/mcp", URL: "http://127.0.0.1:9/mcp", AccessToken: "1", SavedAt: time.Unix(1, 0)})
	tf.put(storedLogin{Issuer: "https://b", Resource: "https://api.example/mcp", URL: "https://api.example/mcp", AccessToken: "2", SavedAt: time.Unix(2, 0)})
	tf.put(storedLogin{Issuer: "https://a", Resource: "https://API.example:443/mcp/", URL: "x", AccessToken: "3", SavedAt: time.Unix(3, 0)})
	if len(tf.Logins) != 2 || tf.Logins[0].AccessToken != "3" {
		t.Fatalf("put by issuer + resource: %+v", tf.Logins)
	}
	if err := saveTokens(store, tf); err != nil {
		t.Fatal(err)
	}
	checkStoreFile(t, store)
	got := readStore(t, store)
	for u, want := range map[string]string{"http://127.0.0.1:9/mcp": "", "https://api.example/mcp": "2", "https://api.example/other": ""} {
		l := got.forURL(u)
		if (l == nil) != (want == "") || l != nil && l.AccessToken != want {
			t.Errorf("forURL(%s) = %+v, want token %q", u, l, want)
		}
	}
	// Without a login made with that URL, the latest login for the resource.
	got.Logins[1].URL = "http://127.0.0.1:9/mcp"
	if l := got.forURL("https://api.example/mcp"); l == nil || l.AccessToken != "3" {
		t.Errorf("resource match: %+v", l)
	}
	if l := got.forURL("http://127.0.0.1:9/mcp"); l == nil || l.AccessToken != "2" {
		t.Errorf("URL match: %+v", l)
	}

	if err := os.Chmod(store, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTokens(store); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable store: %v", err)
	}
	for name, body := range map[string]string{"not JSON": "{", "other version": `{"version":9}`} {
		if err := os.WriteFile(store, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(store, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadTokens(store); err == nil || !strings.Contains(err.Error(), "delete it and run 'jobgate login'") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A write that cannot finish leaves the old file whole and no temporary file.
	if err := os.WriteFile(store, []byte(`{"version":1,"logins":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(store), 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(filepath.Dir(store), 0o700)
	if os.Geteuid() != 0 { // root writes anyway
		if err := saveTokens(store, tf); err == nil {
			t.Error("saved into a read-only dir")
		}
		if b, _ := os.ReadFile(store); string(b) != `{"version":1,"logins":[]}` {
			t.Errorf("failed save changed the store: %s", b)
		}
	}
}

func TestSameURL(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"http://localhost:8080/mcp", "http://LOCALHOST:8080/mcp/", true},
		{"https://x.example/mcp", "https://x.example:443/mcp", true},
		{"http://x.example/mcp", "http://x.example:80/mcp", true},
		{"http://[::1]:8080/mcp", "http://[::1]:8080/mcp", true},
		{"http://localhost:8080/mcp", "http://127.0.0.1:8080/mcp", false},
		{"http://x.example/mcp", "https://x.example/mcp", false},
		{"http://x.example/mcp", "http://x.example/MCP", false},
		{"http://x.example/mcp?a=1", "http://x.example/mcp", false},
		{"not a url", "not a url", false},
	} {
		if got := sameURL(tc.a, tc.b); got != tc.same {
			t.Errorf("sameURL(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

// TestTokenStoreRefusesUnsafe: a tokens.json that is a symlink or not a file, and a store
// directory others may write, are refused on read (and the directory on write) with what to
// do, in one line.
func TestTokenStoreRefusesUnsafe(t *testing.T) {
	store := isolate(t)
	dir := filepath.Dir(store)
	if err := saveTokens(store, &tokenFile{}); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "planted.json")
	if err := os.WriteFile(elsewhere, []byte(`{"version":1,"logins":[{"issuer":"https://evil"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(store); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, store); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTokens(store); err == nil || !strings.Contains(err.Error(), "is a symlink") {
		t.Errorf("symlinked store: %v", err)
	}
	if err := os.Remove(store); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTokens(store); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory as store: %v", err)
	}
	if err := os.Remove(store); err != nil {
		t.Fatal(err)
	}
	if err := saveTokens(store, &tokenFile{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	want := "token store directory " + dir + " is writable by others (mode 0777); run 'chmod 700 " + dir + "'"
	if _, err := loadTokens(store); err == nil || err.Error() != want {
		t.Errorf("load from a world-writable dir: %v", err)
	}
	if err := saveTokens(store, &tokenFile{}); err == nil || err.Error() != want {
		t.Errorf("save into a world-writable dir: %v", err)
	}
	c := start("whoami", "--url", "http://127.0.0.1:1/mcp")
	if err := c.wait(t); err == nil || err.Error() != want {
		t.Errorf("whoami with a world-writable store dir: %v", err)
	}
}
