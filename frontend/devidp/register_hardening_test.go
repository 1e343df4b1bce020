package devidp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// postRegister POSTs body to /register with contentType and origin ("" = no header) and
// returns the status and the JSON answer.
func postRegister(t *testing.T, p *testIdP, contentType, origin, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, p.issuer+"/register", strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("register: %s: %s", resp.Status, b)
	}
	return resp.StatusCode, m
}

// TestRegisterCrossSiteRefused: a page on another site can POST text/plain with no-cors (no
// preflight) and used to register a client per request, up to the 1000-client cap, for good.
// /register now takes application/json only (a cross-site page cannot send it without a
// preflight that gets no CORS answer) and refuses a foreign Origin. Before the fix the
// text/plain registration answered 201.
func TestRegisterCrossSiteRefused(t *testing.T) {
	p := startIdP(t, "")
	const body = `{"redirect_uris":["http://127.0.0.1/cb"]}`
	issuerOrigin := strings.TrimSuffix(p.issuer, "/oidc")
	for _, tc := range []struct {
		contentType, origin string
		status              int
		field               string
	}{
		{"text/plain", "http://evil.example", http.StatusUnsupportedMediaType, "Content-Type"},
		{"text/plain", "", http.StatusUnsupportedMediaType, "Content-Type"},
		{"", "", http.StatusUnsupportedMediaType, "Content-Type"},
		{"application/x-www-form-urlencoded", "", http.StatusUnsupportedMediaType, "Content-Type"},
		{"application/json", "http://evil.example", http.StatusForbidden, "Origin"},
		{"application/json", "null", http.StatusForbidden, "Origin"},
		{"application/json", issuerOrigin + ".evil.example", http.StatusForbidden, "Origin"},
	} {
		status, m := postRegister(t, p, tc.contentType, tc.origin, body)
		desc, _ := m["error_description"].(string)
		if status != tc.status || !strings.HasPrefix(desc, tc.field) {
			t.Errorf("register with Content-Type %q, Origin %q: %d %v, want %d naming %s", tc.contentType, tc.origin, status, m, tc.status, tc.field)
		}
	}
	for _, ok := range []struct{ contentType, origin string }{
		{"application/json", ""}, {"application/json; charset=utf-8", issuerOrigin},
	} {
		if status, m := postRegister(t, p, ok.contentType, ok.origin, body); status != http.StatusCreated {
			t.Errorf("register with Content-Type %q, Origin %q: %d %v, want 201", ok.contentType, ok.origin, status, m)
		}
	}
	p.store.clientsMu.RLock()
	n := len(p.store.clients)
	p.store.clientsMu.RUnlock()
	if n != 3 {
		t.Fatalf("%d clients, want jobgate-cli and the 2 accepted registrations", n)
	}
}

// TestRegisterLoopbackIsParsed: a redirect URI's host is loopback only when it is localhost or
// a loopback IP; 127.evil.example (a DNS name anyone can point anywhere) used to pass as one.
func TestRegisterLoopbackIsParsed(t *testing.T) {
	p := startIdP(t, "")
	for _, u := range []string{"http://127.evil.example/cb", "http://127.0.0.1.evil.example/cb", "http://localhost.evil.example/cb", "http://[::2]/cb"} {
		status, m := postJSON(t, p.issuer+"/register", `{"redirect_uris":["`+u+`"]}`)
		if desc, _ := m["error_description"].(string); status != 400 || m["error"] != "invalid_redirect_uri" || !strings.HasPrefix(desc, "redirect_uris") {
			t.Errorf("register %s: %d %v, want 400 invalid_redirect_uri", u, status, m)
		}
	}
	for _, u := range []string{"http://127.0.0.1/cb", "http://127.1.2.3:9/cb", "http://localhost/cb", "http://[::1]:7/cb"} {
		if status, m := postJSON(t, p.issuer+"/register", `{"redirect_uris":["`+u+`"]}`); status != http.StatusCreated {
			t.Errorf("register %s: %d %v, want 201", u, status, m)
		}
	}
	if _, err := New(Options{Issuer: "http://127.evil.example/oidc", Resource: testResource, Users: testUsers}); err == nil || !strings.Contains(err.Error(), "Options.Issuer") {
		t.Errorf("New with an http issuer on 127.evil.example: %v, want an Options.Issuer error", err)
	}
}

// TestUnusedClientsExpire: a registered client that never got a token is dropped
// UnusedClientTTLDefault after registration (so junk registrations cannot hold the cap for
// good), across a restart too; a client that signed someone in stays.
func TestUnusedClientsExpire(t *testing.T) {
	dir := t.TempDir()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	p := startIdPWith(t, Options{Dir: dir, Now: now})
	register := func(p *testIdP) string {
		status, m := postJSON(t, p.issuer+"/register", `{"redirect_uris":["http://localhost/callback"]}`)
		if status != http.StatusCreated {
			t.Fatalf("register: %d %v", status, m)
		}
		return m["client_id"].(string)
	}
	unused, used := register(p), register(p)
	cfg := oauthConfig(p.discover(t), "jobs:read")
	cfg.ClientID, cfg.RedirectURL = used, "http://localhost:40002/callback"
	pkce := oauth2.GenerateVerifier()
	code := p.loginTo(t, cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(pkce)), "ana", "s", cfg.RedirectURL)
	if _, err := cfg.Exchange(context.Background(), code, oauth2.VerifierOption(pkce)); err != nil {
		t.Fatal(err)
	}
	known := func(p *testIdP, id string) bool {
		_, err := p.store.GetClientByClientID(context.Background(), id)
		return err == nil
	}
	offset.Store(int64(UnusedClientTTLDefault - time.Minute))
	if !known(p, unused) || !known(p, used) {
		t.Fatal("a client expired before UnusedClientTTLDefault")
	}
	offset.Store(int64(UnusedClientTTLDefault + time.Minute))
	if known(p, unused) {
		t.Fatalf("client %s, registered %s ago and never used, is still known", unused, UnusedClientTTLDefault+time.Minute)
	}
	if !known(p, used) {
		t.Fatalf("client %s, which signed ana in, expired", used)
	}
	// A registration sweeps the expired ones out of clients.json; a restart keeps them out.
	register(p)
	b, err := os.ReadFile(filepath.Join(dir, clientsFile))
	if err != nil || strings.Contains(string(b), unused) || !strings.Contains(string(b), used) {
		t.Fatalf("%s after expiry: %s (err %v)", clientsFile, b, err)
	}
	p.srv.Close()
	p2 := startIdPWith(t, Options{Dir: dir, Now: now})
	if known(p2, unused) || !known(p2, used) {
		t.Fatalf("after a restart: unused client known %v, used client known %v", known(p2, unused), known(p2, used))
	}
}
