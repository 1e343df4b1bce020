package pages

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/webclient"
)

func TestProviderProblems(t *testing.T) {
	t.Run("no tenant claim", func(t *testing.T) {
		// Without the access token's verifier the dev IdP's ID token (no tenant) is all there is.
		e := startEnv(t, envOpts{mutate: func(c *Config) { c.AccessVerifier = nil }})
		noSession(t, e.signIn(t, webclient.New(nil), "ana", "/me"), 403, `carry no &#34;tenant&#34; (tenant) claim`)
	})
	t.Run("other tenant claim name", func(t *testing.T) {
		e := startEnv(t, envOpts{mutate: func(c *Config) { c.Claims.Tenant, c.AccessVerifier = "org", nil }})
		noSession(t, e.signIn(t, webclient.New(nil), "ana", "/me"), 403, `carry no &#34;org&#34; (tenant) claim`)
	})
	t.Run("wrong client secret", func(t *testing.T) {
		e := startEnv(t, envOpts{mutate: func(c *Config) { c.ClientSecret = "wrong" }})
		noSession(t, e.signIn(t, webclient.New(nil), "ana", "/me"), 502, "refused this server&#39;s client credentials (invalid_client)")
	})
	t.Run("clock skew", func(t *testing.T) {
		// This server's clock runs two hours ahead: the provider's hour-long ID token has expired.
		e := startEnv(t, envOpts{mutate: func(c *Config) { c.Now = func() time.Time { return time.Now().Add(2 * time.Hour) } }})
		noSession(t, e.signIn(t, webclient.New(nil), "ana", "/me"), 502, "clock skew")
	})
	t.Run("unreachable issuer", func(t *testing.T) {
		p, err := New(Config{Issuer: "http://127.0.0.1:1/oidc", ClientID: "x", PublicURL: "http://127.0.0.1:2", Keys: testKeys(t)})
		if err != nil {
			t.Fatal(err)
		}
		err = p.Check(context.Background())
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "OIDC issuer http://127.0.0.1:1/oidc: discovery failed") {
			t.Fatalf("Check: %v", err)
		}
		rec := httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:2/login", nil))
		noSession(t, page{status: rec.Code, body: rec.Body.String(), header: rec.Header()}, 502, "cannot be reached")
	})
}

// TestMaxAge: a session older than RequireSession's maxAge is sent back to the IdP with
// prompt=login&max_age=, and comes back fresh; an IdP answer whose auth_time is still too old
// is refused.
// TestDiscoveryMemo: a provider that fails discovery is asked again only after failureMemo, so
// a down provider costs one request per few seconds, not one per page view; success is kept.
func TestDiscoveryMemo(t *testing.T) {
	var hits atomic.Int32
	var up atomic.Bool
	idpSrv := httptest.NewUnstartedServer(nil)
	issuer := "http://" + idpSrv.Listener.Addr().String()
	idpSrv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if !up.Load() {
			http.Error(w, "<html>down\nfor maintenance</html>", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"issuer":"`+issuer+`","authorization_endpoint":"`+issuer+`/a","token_endpoint":"`+issuer+`/t","jwks_uri":"`+issuer+`/k"}`)
	})
	idpSrv.Start()
	defer idpSrv.Close()
	p, err := New(Config{Issuer: issuer, ClientID: "c", PublicURL: "http://127.0.0.1:2", Keys: testKeys(t)})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := p.Check(context.Background()); err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "503 Service Unavailable") {
			t.Fatalf("Check: %v", err)
		}
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d discovery requests for 3 checks within %s", n, failureMemo)
	}
	up.Store(true)
	p.mu.Lock()
	p.lastFail = time.Now().Add(-failureMemo) // as if failureMemo had passed
	p.mu.Unlock()
	for range 3 {
		if err := p.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("%d discovery requests, want 2", n)
	}
}

func TestNewRefuses(t *testing.T) {
	k := testKeys(t)
	ok := Config{Issuer: "https://idp.example.com", ClientID: "c", PublicURL: "https://jobs.example.com", Keys: k}
	for name, mut := range map[string]func(*Config){
		"no issuer":       func(c *Config) { c.Issuer = "" },
		"http issuer":     func(c *Config) { c.Issuer = "http://idp.example.com" },
		"no client":       func(c *Config) { c.ClientID = "" },
		"no keys":         func(c *Config) { c.Keys = nil },
		"http public URL": func(c *Config) { c.PublicURL = "http://jobs.example.com" },
		"query in URL":    func(c *Config) { c.PublicURL = "https://jobs.example.com/?x" },
		"long TTL":        func(c *Config) { c.SessionTTL = 25 * time.Hour },
		"bad claim":       func(c *Config) { c.Claims.Tenant = "sub" },
	} {
		c := ok
		mut(&c)
		if _, err := New(c); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v", name, err)
		}
	}
	p, err := New(ok)
	if err != nil {
		t.Fatal(err)
	}
	if p.sessionCookie != "__Host-jobgate_session" || !p.secure {
		t.Errorf("https: cookie %q secure %v", p.sessionCookie, p.secure)
	}
}
