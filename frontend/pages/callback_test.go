package pages

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/tests/support/webclient"
)

func TestCallbackRefusals(t *testing.T) {
	e := startEnv(t, envOpts{})
	u, _ := url.Parse(e.base)

	t.Run("state mismatch", func(t *testing.T) {
		c := webclient.New(nil)
		back := e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
		bu, _ := url.Parse(back)
		q := bu.Query()
		q.Set("state", "forged")
		bu.RawQuery = q.Encode()
		noSession(t, do(t, c, "GET", bu.String(), nil), 400, "state mismatch")
	})
	t.Run("iss mismatch", func(t *testing.T) {
		c := webclient.New(nil)
		back := e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
		bu, _ := url.Parse(back)
		q := bu.Query()
		q.Set("iss", "https://evil.example")
		bu.RawQuery = q.Encode()
		noSession(t, do(t, c, "GET", bu.String(), nil), 400, "iss mismatch")
	})
	t.Run("nonce mismatch", func(t *testing.T) {
		c := webclient.New(nil)
		back := e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
		var ls handle.LoginState
		for _, ck := range c.Jar.Cookies(&url.URL{Scheme: "http", Host: u.Host, Path: "/auth/callback"}) {
			if ck.Name == "jobgate_login" {
				ls, _ = e.keys.OpenLoginState(ck.Value, time.Now())
			}
		}
		if ls.State == "" {
			t.Fatal("no login cookie")
		}
		ls.Nonce = "another"
		c.Jar.SetCookies(u, []*http.Cookie{{Name: "jobgate_login", Value: e.keys.SealLoginState(ls), Path: "/"}})
		noSession(t, do(t, c, "GET", back, nil), 400, "nonce mismatch")
	})
	t.Run("no login cookie", func(t *testing.T) {
		c := webclient.New(nil)
		back := e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
		noSession(t, do(t, webclient.New(nil), "GET", back, nil), 400, "not started in this browser")
	})
	t.Run("replayed callback", func(t *testing.T) {
		c := webclient.New(nil)
		back := e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
		wantRedirect(t, do(t, c, "GET", back, nil), e.base+"/me")
		noSession(t, do(t, c, "GET", back, nil), 400, "not started in this browser")
	})
	t.Run("access denied", func(t *testing.T) {
		c := webclient.New(nil)
		authorize := wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer)
		au, _ := url.Parse(authorize)
		// What the IdP sends back when the person refuses (RFC 6749 §4.1.2.1).
		p := do(t, c, "GET", e.base+"/auth/callback?"+url.Values{"error": {"access_denied"}, "error_description": {"<b>no</b>"}, "state": {au.Query().Get("state")}}.Encode(), nil)
		noSession(t, p, 403, "Sign-in was refused at the identity provider (access_denied).")
		if strings.Contains(p.body, "<b>no</b>") {
			t.Error("the provider's description is echoed unescaped")
		}
	})
	t.Run("return path", func(t *testing.T) {
		for _, bad := range []string{"//evil.example", "//evil.example/me", "/\\evil.example", "https://evil.example/", "evil", "/auth/callback", "/me\r\nX: y", "javascript:alert(1)"} {
			noSession(t, do(t, webclient.New(nil), "GET", e.base+"/login?"+url.Values{"return": {bad}}.Encode(), nil), 400, "must be a path on this site")
		}
		c := webclient.New(nil)
		wantRedirect(t, e.signIn(t, c, "steward", "/protected?x=1&y=%2F"), e.base+"/protected?x=1&y=%2F")
		if p := do(t, c, "GET", e.base+"/protected?x=1", nil); p.body != "protected GET for steward of acme" {
			t.Fatalf("landed: %s", p.body)
		}
	})
}

// TestIssRequired: a provider whose discovery advertises
// authorization_response_iss_parameter_supported must put iss in every authorization response
// (RFC 9207); a callback without it is refused (an attacker's provider, in a mix-up, would leave
// it out), one with the right iss signs in. The dev IdP (zitadel) does not send iss, so the
// test adds the promise to its discovery document and iss to the callback by hand.
func TestIssRequired(t *testing.T) {
	e := startEnv(t, envOpts{idpWrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, "/.well-known/openid-configuration") {
				next.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			var m map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
				t.Errorf("discovery: %v", err)
			}
			m["authorization_response_iss_parameter_supported"] = true
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(m)
		})
	}})
	withIss := func(back, iss string) string {
		bu, _ := url.Parse(back)
		q := bu.Query()
		q.Set("iss", iss)
		bu.RawQuery = q.Encode()
		return bu.String()
	}
	c := webclient.New(nil)
	back := e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
	noSession(t, do(t, c, "GET", back, nil), 400, "iss missing")

	c = webclient.New(nil)
	back = e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
	noSession(t, do(t, c, "GET", withIss(back, "https://evil.example"), nil), 400, "iss mismatch")

	c = webclient.New(nil)
	back = e.pick(t, c, wantRedirect(t, do(t, c, "GET", e.base+"/login", nil), e.issuer), "ana")
	wantRedirect(t, do(t, c, "GET", withIss(back, e.issuer), nil), e.base+"/me")
	if me := do(t, c, "GET", e.base+"/me", nil); me.status != 200 || !strings.Contains(me.body, "Signed in as ana") {
		t.Fatalf("/me: %d %s", me.status, me.body)
	}
}
