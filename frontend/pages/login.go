package pages

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/coreos/go-oidc/v3/oidc"
	"go.uber.org/zap"
	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
)

// maxReturnLen bounds the return path a login carries (it rides in the login cookie).
const maxReturnLen = 1024

// localPath reports whether s is a path on this site to return to after sign-in: it starts
// with one "/" (not "//" or "/\", which browsers read as another host), has no scheme, host
// or control characters, and is not one of the sign-in paths themselves.
func localPath(s string) bool {
	if s == "" || len(s) > maxReturnLen || s[0] != '/' || strings.HasPrefix(s, "//") || strings.HasPrefix(s, "/\\") {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == '\\' {
			return false
		}
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return false
	}
	return !strings.HasPrefix(u.Path, "/auth/") && u.Path != PathLogin && u.Path != PathLogout
}

// login starts a sign-in: GET /login?return=/path.
func (p *Pages) login(w http.ResponseWriter, r *http.Request) {
	ret := r.URL.Query().Get("return")
	if ret == "" {
		ret = PathMe
	}
	if !localPath(ret) {
		p.fail(w, r, http.StatusBadRequest, "The return address must be a path on this site.", nil)
		return
	}
	p.startLogin(w, r, ret, 0)
}

// startLogin sets the login cookie and sends the browser to the provider. maxAge > 0 demands
// a fresh authentication (prompt=login&max_age=).
func (p *Pages) startLogin(w http.ResponseWriter, r *http.Request, ret string, maxAge time.Duration) {
	d, err := p.discover(r.Context())
	if err != nil {
		p.fail(w, r, http.StatusBadGateway, "The identity provider cannot be reached; try again later.", err)
		return
	}
	ls := handle.LoginState{State: rand.Text(), Nonce: rand.Text(), Verifier: oauth2.GenerateVerifier(), ReturnTo: ret,
		MaxAge: maxAge.Truncate(time.Second), Expiry: p.cfg.Now().Add(handle.LoginStateTTL)}
	sealed := p.cfg.Keys.SealLoginState(ls)
	if sealed == "" {
		p.fail(w, r, http.StatusBadRequest, "The return address is too long.", nil)
		return
	}
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(ls.Verifier), oidc.Nonce(ls.Nonce)}
	if p.cfg.Resource != "" {
		opts = append(opts, oauth2.SetAuthURLParam("resource", p.cfg.Resource))
	}
	if ls.MaxAge > 0 {
		opts = append(opts, oauth2.SetAuthURLParam("max_age", strconv.FormatInt(int64(ls.MaxAge/time.Second), 10)),
			oauth2.SetAuthURLParam("prompt", "login"))
	}
	// Path=/ (not /auth): behind a proxy that adds a path prefix the callback is
	// <prefix>/auth/callback, which a cookie set for /auth would never reach; and __Host-
	// demands Path=/.
	http.SetCookie(w, &http.Cookie{Name: p.loginCookie, Value: sealed, Path: "/", MaxAge: int(handle.LoginStateTTL / time.Second),
		HttpOnly: true, Secure: p.secure, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, d.oauth.AuthCodeURL(ls.State, opts...), http.StatusFound)
}

// freshEnough reports whether an authentication at authTime (zero: unknown) meets maxAge at
// now, allowing authTimeLeeway of clock skew between this server and the provider. The
// callback and RequireSession must both use it: were RequireSession stricter than the
// callback, a fresh login that the callback accepts inside the leeway would be sent straight
// back to the provider, for ever.
// FreshEnough reports whether a sign-in at authTime is recent enough at now for maxAge, with the
// same leeway RequireSession(maxAge, …) allows: a page that checks before calling it (to keep a
// form's input instead of refusing the POST) must agree with it, or its re-login link would
// loop.
func FreshEnough(authTime, now time.Time, maxAge time.Duration) bool {
	return freshEnough(authTime, now, maxAge)
}

func freshEnough(authTime, now time.Time, maxAge time.Duration) bool {
	return !authTime.IsZero() && now.Sub(authTime) <= maxAge+authTimeLeeway
}

// idClaims are the ID token claims the session keeps besides those PrincipalFromClaims reads.
type idClaims struct {
	AZP      string   `json:"azp"`
	AuthTime int64    `json:"auth_time"`
	ACR      string   `json:"acr"`
	AMR      []string `json:"amr"`
	Name     string   `json:"name"`
	Email    string   `json:"email"`
}

// callback finishes a sign-in: GET /auth/callback?code=&state= (or ?error=).
func (p *Pages) callback(w http.ResponseWriter, r *http.Request) {
	// The login cookie is spent whatever happens: a callback is never replayed.
	http.SetCookie(w, &http.Cookie{Name: p.loginCookie, Path: "/", MaxAge: -1, HttpOnly: true, Secure: p.secure, SameSite: http.SameSiteLaxMode})
	now := p.cfg.Now()
	q := r.URL.Query()
	ls, ok := p.callbackLoginState(w, r, q, now)
	if !ok {
		return
	}
	// Discovery was memoised when this sign-in started; it says whether iss is mandatory.
	d, err := p.discover(r.Context())
	if err != nil {
		p.fail(w, r, http.StatusBadGateway, "The identity provider cannot be reached; try again later.", err)
		return
	}
	if !p.callbackResponseOK(w, r, q, d) {
		return
	}
	code := q.Get("code")
	if code == "" {
		p.fail(w, r, http.StatusBadRequest, "The sign-in response carries no authorization code; sign in again.", nil)
		return
	}
	ctx := oidc.ClientContext(r.Context(), p.cfg.HTTPClient)
	tok, ok := p.exchangeCode(ctx, w, r, d, code, ls)
	if !ok {
		return
	}
	idt, all, extra, ok := p.verifyIDToken(ctx, w, r, d, tok, ls)
	if !ok {
		return
	}
	var authTime time.Time
	if extra.AuthTime > 0 {
		authTime = time.Unix(extra.AuthTime, 0).UTC()
	}
	if ls.MaxAge > 0 && !freshEnough(authTime, now, ls.MaxAge) {
		p.fail(w, r, http.StatusForbidden, "This page needs a fresh sign-in, and the identity provider did not perform one (auth_time missing or too old).", nil)
		return
	}
	pr, err := p.principal(r, all, idt.Subject, tok.AccessToken)
	if err != nil {
		p.fail(w, r, http.StatusForbidden, "Signed in, but "+err.Error()+"; ask the operator to map your account to a tenant.", err)
		return
	}
	s := handle.Session{Issuer: idt.Issuer, Subject: pr.Subject, Tenant: pr.Tenant, Scopes: authz.ScopeStrings(pr.Scopes),
		Name: extra.Name, Email: extra.Email, AuthTime: authTime, AMR: extra.AMR, ACR: extra.ACR, CSRF: rand.Text(),
		Expiry: now.Add(p.cfg.SessionTTL)}
	sealed := p.cfg.Keys.SealSession(s)
	if sealed == "" {
		// Display fields are what a provider may make long; the rest is bounded.
		s.Name, s.Email, s.AMR, s.ACR = "", "", nil, ""
		sealed = p.cfg.Keys.SealSession(s)
	}
	if sealed == "" {
		p.fail(w, r, http.StatusBadGateway, "The identity provider's claims are too large for a session.", s.Validate())
		return
	}
	p.setSession(w, sealed)
	p.cfg.Logger.Info("signed in", zap.String("issuer", s.Issuer), zap.String("tenant", s.Tenant), zap.String("principal", s.Subject))
	http.Redirect(w, r, p.base+ls.ReturnTo, http.StatusSeeOther)
}

// callbackLoginState opens the login cookie and checks that the response's state is its own.
// On failure it has answered the request.
func (p *Pages) callbackLoginState(w http.ResponseWriter, r *http.Request, q url.Values, now time.Time) (handle.LoginState, bool) {
	c, err := r.Cookie(p.loginCookie)
	if err != nil {
		p.fail(w, r, http.StatusBadRequest, "This sign-in was not started in this browser, or took too long; sign in again.", err)
		return handle.LoginState{}, false
	}
	ls, err := p.cfg.Keys.OpenLoginState(c.Value, now)
	if err != nil {
		p.fail(w, r, http.StatusBadRequest, "This sign-in was not started in this browser, or took too long; sign in again.", err)
		return handle.LoginState{}, false
	}
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(ls.State)) != 1 {
		p.fail(w, r, http.StatusBadRequest, "The sign-in response does not belong to this browser's sign-in (state mismatch); sign in again.", nil)
		return handle.LoginState{}, false
	}
	return ls, true
}

// callbackResponseOK checks who answered (iss) and whether the provider reported an error.
// On failure it has answered the request.
func (p *Pages) callbackResponseOK(w http.ResponseWriter, r *http.Request, q url.Values, d *discovered) bool {
	// RFC 9207 (mix-up defence): a provider that names itself in the response must be ours, and
	// one that advertises the iss parameter must name itself, or an attacker's provider could
	// answer in its place by leaving iss out.
	switch {
	case q.Has("iss") && q.Get("iss") != p.cfg.Issuer:
		p.fail(w, r, http.StatusBadRequest, "The sign-in response comes from another identity provider (iss mismatch); sign in again.", nil)
		return false
	case !q.Has("iss") && d.issParam:
		p.fail(w, r, http.StatusBadRequest, "The sign-in response does not name its identity provider, which promises to (iss missing); sign in again.", nil)
		return false
	}
	if e := q.Get("error"); e != "" {
		status, msg := http.StatusBadGateway, "The identity provider could not sign you in ("+shortCode(e)+")."
		switch e {
		case "access_denied":
			status, msg = http.StatusForbidden, "Sign-in was refused at the identity provider (access_denied)."
		case "login_required", "interaction_required", "consent_required":
			status = http.StatusForbidden
		}
		p.fail(w, r, status, msg, fmt.Errorf("provider error %q: %s", e, oneLine(q.Get("error_description"))))
		return false
	}
	return true
}

// exchangeCode redeems the authorization code with the PKCE verifier. On failure it has
// answered the request.
func (p *Pages) exchangeCode(ctx context.Context, w http.ResponseWriter, r *http.Request, d *discovered, code string, ls handle.LoginState) (*oauth2.Token, bool) {
	opts := []oauth2.AuthCodeOption{oauth2.VerifierOption(ls.Verifier)}
	if p.cfg.Resource != "" {
		opts = append(opts, oauth2.SetAuthURLParam("resource", p.cfg.Resource))
	}
	tok, err := d.oauth.Exchange(ctx, code, opts...)
	if err != nil {
		var re *oauth2.RetrieveError
		switch {
		case errors.As(err, &re) && (re.ErrorCode == "invalid_client" || re.ErrorCode == "unauthorized_client"):
			p.fail(w, r, http.StatusBadGateway, "The identity provider refused this server's client credentials ("+re.ErrorCode+"); the operator must check the OIDC client ID and secret.", err)
		case errors.As(err, &re):
			p.fail(w, r, http.StatusBadGateway, "The identity provider refused to complete the sign-in ("+shortCode(re.ErrorCode)+"); sign in again.", err)
		default:
			p.fail(w, r, http.StatusBadGateway, "The identity provider cannot be reached; try again later.", err)
		}
		return nil, false
	}
	return tok, true
}

// verifyIDToken verifies the token response's ID token, checks its nonce and authorized party,
// and reads its claims. On failure it has answered the request.
func (p *Pages) verifyIDToken(ctx context.Context, w http.ResponseWriter, r *http.Request, d *discovered, tok *oauth2.Token, ls handle.LoginState) (*oidc.IDToken, map[string]any, idClaims, bool) {
	rawID, _ := tok.Extra("id_token").(string)
	if rawID == "" {
		p.fail(w, r, http.StatusBadGateway, "The identity provider returned no ID token; the operator must allow the openid scope for this client.", nil)
		return nil, nil, idClaims{}, false
	}
	idt, err := d.verifier.Verify(ctx, rawID)
	if err != nil {
		var exp *oidc.TokenExpiredError
		// go-oidc has a type for expiry only; its nbf failure is an error string.
		if errors.As(err, &exp) || strings.Contains(err.Error(), "before the nbf") {
			p.fail(w, r, http.StatusBadGateway, "The identity provider's ID token is already expired or not yet valid: this server's clock and the provider's disagree (clock skew).", err)
		} else {
			p.fail(w, r, http.StatusBadGateway, "The identity provider's ID token did not verify.", err)
		}
		return nil, nil, idClaims{}, false
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(ls.Nonce)) != 1 {
		p.fail(w, r, http.StatusBadRequest, "The ID token does not belong to this browser's sign-in (nonce mismatch); sign in again.", nil)
		return nil, nil, idClaims{}, false
	}
	var all map[string]any
	var extra idClaims
	if err := idt.Claims(&all); err != nil {
		p.fail(w, r, http.StatusBadGateway, "The identity provider's ID token is not a JSON object.", err)
		return nil, nil, idClaims{}, false
	}
	if err := idt.Claims(&extra); err != nil {
		p.fail(w, r, http.StatusBadGateway, "The identity provider's ID token has a malformed auth_time, acr, amr, name or email claim.", err)
		return nil, nil, idClaims{}, false
	}
	// go-oidc checks that aud contains our client ID; an authorized party, when named, must be
	// us too (OIDC Core 3.1.3.7), or the token was issued to another client.
	if extra.AZP != "" && extra.AZP != p.cfg.ClientID {
		p.fail(w, r, http.StatusBadGateway, "The identity provider's ID token was issued to another client (azp).", nil)
		return nil, nil, idClaims{}, false
	}
	return idt, all, extra, true
}

// principal reads tenant and scopes from the verified ID token claims, or from the access
// token (through AccessVerifier) where the ID token lacks them. Its error is a phrase for the
// page ("your identity provider's token has no tenant claim").
func (p *Pages) principal(r *http.Request, idClaims map[string]any, sub, accessToken string) (authz.Principal, error) {
	fromID, idErr := authz.PrincipalFromClaims(idClaims, p.cfg.Claims)
	if idErr == nil && len(fromID.Scopes) > 0 {
		return fromID, nil
	}
	if p.cfg.AccessVerifier != nil && accessToken != "" {
		c, err := p.cfg.AccessVerifier.Verify(r.Context(), accessToken)
		switch {
		case err != nil:
			p.cfg.Logger.Info("sign-in: the access token did not verify; the ID token alone decides", zap.Error(err))
		case c.Issuer != p.cfg.Issuer || c.Principal.Subject != sub:
			p.cfg.Logger.Warn("sign-in: the access token names another issuer or subject; ignored",
				zap.String("issuer", c.Issuer))
		case idErr == nil && c.Principal.Tenant != fromID.Tenant:
			return authz.Principal{}, errors.New("the ID token and the access token name different tenants")
		default:
			return c.Principal, nil
		}
	}
	if idErr != nil {
		tc := p.cfg.Claims.Tenant
		if tc == "" {
			tc = authz.TenantClaimDefault
		}
		if _, ok := idClaims[tc]; !ok {
			return authz.Principal{}, fmt.Errorf("your identity provider's tokens carry no %q (tenant) claim", tc)
		}
		return authz.Principal{}, fmt.Errorf("your identity provider's token was refused (%s)", strings.TrimPrefix(idErr.Error(), authz.ErrInvalidToken.Error()+": "))
	}
	return fromID, nil // signed in without jobs scopes: the pages show who, and allow nothing
}

// shortCode keeps a provider's error code printable and short for the page.
func shortCode(s string) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= 40 {
			break
		}
		if r == '_' || r == '-' || r == '.' || r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "error"
	}
	return b.String()
}
