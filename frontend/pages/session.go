package pages

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/frontend/handle"
)

type sessionKey struct{}

// maxFormBytes bounds the body of a POST the pages parse for its CSRF field (the forms are a
// few fields; Go's own default would read 10 MB).
const maxFormBytes = 64 << 10

// SessionFrom returns the session RequireSession put in the request's context.
func SessionFrom(ctx context.Context) (handle.Session, bool) {
	s, ok := ctx.Value(sessionKey{}).(handle.Session)
	return s, ok
}

func (p *Pages) setSession(w http.ResponseWriter, sealed string) {
	http.SetCookie(w, &http.Cookie{Name: p.sessionCookie, Value: sealed, Path: "/", MaxAge: int(p.cfg.SessionTTL / time.Second),
		HttpOnly: true, Secure: p.secure, SameSite: http.SameSiteLaxMode})
}

func (p *Pages) clearSession(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: p.sessionCookie, Path: "/", MaxAge: -1, HttpOnly: true, Secure: p.secure, SameSite: http.SameSiteLaxMode})
}

// session opens the request's session cookie. A cookie that does not open, has expired or
// names another issuer is no session (present reports whether there was a cookie at all).
func (p *Pages) session(r *http.Request) (s handle.Session, present bool, err error) {
	c, err := r.Cookie(p.sessionCookie)
	if err != nil {
		return handle.Session{}, false, err
	}
	s, err = p.cfg.Keys.OpenSession(c.Value, p.cfg.Now())
	if err != nil {
		return handle.Session{}, true, err
	}
	if s.Issuer != p.cfg.Issuer {
		return handle.Session{}, true, errors.New("session of another issuer")
	}
	return s, true, nil
}

// RequireSession serves next only to a signed-in person, with the session in the request's
// context (SessionFrom). Without a valid session a GET is sent to sign in and back; with maxAge
// > 0 a session whose authentication is older than maxAge (or of unknown age) is sent back to
// the identity provider with prompt=login&max_age= for a fresh one (for sensitive pages). A
// state-changing request without a valid (or fresh enough) session is refused with 401/403 and
// never redirected. Every request other than GET and HEAD must also carry the form field
// "csrf" equal to the session's CSRF token (the cross-origin check runs before, in Handler;
// mount next under Handler's mux or wrap it in net/http.CrossOriginProtection).
func (p *Pages) RequireSession(maxAge time.Duration, next http.Handler) http.Handler {
	return crossOrigin(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		safe := r.Method == http.MethodGet || r.Method == http.MethodHead
		s, present, err := p.session(r)
		if err != nil {
			if present {
				p.cfg.Logger.Info("session cookie refused", zap.Error(err))
				p.clearSession(w)
			}
			if !safe {
				p.fail(w, r, http.StatusUnauthorized, "You are not signed in (or your session ended); sign in and try again.", nil)
				return
			}
			http.Redirect(w, r, p.base+PathLogin+"?"+url.Values{"return": {returnPath(r)}}.Encode(), http.StatusSeeOther)
			return
		}
		if !safe {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.CSRF)) != 1 {
				p.fail(w, r, http.StatusForbidden, "This form is out of date or was sent from another site (CSRF check failed); reload the page and try again.", nil)
				return
			}
		}
		if maxAge > 0 && !freshEnough(s.AuthTime, p.cfg.Now(), maxAge) {
			if !safe {
				p.fail(w, r, http.StatusForbidden, "This action needs a fresh sign-in; reload the page to sign in again.", nil)
				return
			}
			p.startLogin(w, r, returnPath(r), maxAge)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
	}))
}

// returnPath is where a sign-in started by RequireSession comes back to: this request's path and
// query, or /me when that is no local path /login accepts (over maxReturnLen, which a long query
// reaches): a page that cannot be returned to is better than a sign-in that fails with 400.
func returnPath(r *http.Request) string {
	if ret := r.URL.RequestURI(); localPath(ret) {
		return ret
	}
	return PathMe
}

// logout: POST /logout with the session's CSRF token. It clears the cookie and continues with
// the provider's RP-initiated logout when it has one.
func (p *Pages) logout(w http.ResponseWriter, r *http.Request) {
	s, present, err := p.session(r)
	if err != nil {
		// No session to protect, so no CSRF token to check. A dead cookie that came with the
		// request is cleared; none is cleared when none came: a cross-site POST gets no cookie
		// (SameSite=Lax), and should it pass the origin check it must not delete the live
		// session the browser holds (logout CSRF).
		if present {
			p.clearSession(w)
		}
		http.Redirect(w, r, p.base+PathSignedOut, http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.CSRF)) != 1 {
		p.fail(w, r, http.StatusForbidden, "This form is out of date or was sent from another site (CSRF check failed); reload the page and try again.", nil)
		return
	}
	p.clearSession(w)
	p.cfg.Logger.Info("signed out", zap.String("issuer", s.Issuer), zap.String("tenant", s.Tenant), zap.String("principal", s.Subject))
	target := p.base + PathSignedOut
	if d, err := p.discover(r.Context()); err == nil && d.endSession != "" {
		if u, err := url.Parse(d.endSession); err == nil {
			q := u.Query()
			q.Set("client_id", p.cfg.ClientID)
			q.Set("post_logout_redirect_uri", p.base+PathSignedOut)
			u.RawQuery = q.Encode()
			target = u.String()
		}
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// crossOrigin refuses cross-origin state-changing requests (Sec-Fetch-Site, Origin) with 403.
func crossOrigin(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = render(w, http.StatusForbidden, "message", view{Title: "Request refused",
			Message: "This request came from another site and was refused (cross-origin POST)."}) // a fixed page: it renders or the tests fail
	}))
	return cop.Handler(next)
}

// securityHeaders: the pages embed nothing and run no script.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}
