package pages

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/jobgate/jobgate/tests/support/webclient"
)

// TestLogoutWithoutCookie: POST /logout that carries no session cookie (what a cross-site form
// gets under SameSite=Lax) clears nothing, since it has no CSRF token to check against: should
// it pass the origin check, it must not delete the browser's live session. A dead cookie that
// came with the request is cleared.
func TestLogoutWithoutCookie(t *testing.T) {
	e := startEnv(t, envOpts{})
	p := do(t, webclient.New(nil), "POST", e.base+PathLogout, url.Values{"csrf": {"guess"}})
	wantRedirect(t, p, e.base+PathSignedOut)
	if c := cookieNamed(p.header, "jobgate_session"); c != nil {
		t.Fatalf("a POST without a session cookie set %+v", c)
	}
	c := webclient.New(nil)
	u, _ := url.Parse(e.base)
	c.Jar.SetCookies(u, []*http.Cookie{{Name: "jobgate_session", Value: "jgx1.k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}})
	p = do(t, c, "POST", e.base+PathLogout, url.Values{"csrf": {"guess"}})
	wantRedirect(t, p, e.base+PathSignedOut)
	if cl := cookieNamed(p.header, "jobgate_session"); cl == nil || cl.MaxAge >= 0 {
		t.Fatalf("a dead cookie was not cleared: %+v", cl)
	}
}
