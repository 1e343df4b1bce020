package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jobgate/jobgate/authz"
)

// whoami and logout, and reading a token's claims.
//
// The CLI reads an access token's claims without verifying its signature: only to check at
// login that the token can work here (it names our resource and carries the tenant) and to show
// whoami. That is safe because nothing is granted on it here: the server verifies the token on
// every call, and a forged token fails there.

// skewLeeway is how far the IdP's clock may differ from this machine's before login says so.
const skewLeeway = time.Minute

// tokenInfo is what a JWT access token says (unverified).
type tokenInfo struct {
	Issuer, Subject, Tenant string
	Scopes                  []string
	Audience                []string
	Exp, Iat                time.Time
}

// expiry is the token's exp, else fallback (the token response's expires_in).
func (i *tokenInfo) expiry(fallback time.Time) time.Time {
	if !i.Exp.IsZero() {
		return i.Exp.UTC()
	}
	return fallback.UTC()
}

// decodeJWT reads a JWS compact token's claims without verifying it.
func decodeJWT(tok string) (map[string]any, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, errors.New("not a JWT (an opaque token)")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, errors.New("not a JWT (bad base64url claims)")
	}
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, errors.New("not a JWT (claims are not a JSON object)")
	}
	return m, nil
}

// readTokenInfo reads the claims whoami shows; tenant and scopes through authz, as the server
// reads them (a token without its tenant still shows the rest).
func readTokenInfo(tok, tenantClaim string) (*tokenInfo, map[string]any, error) {
	m, err := decodeJWT(tok)
	if err != nil {
		return nil, nil, err
	}
	i := &tokenInfo{}
	i.Issuer, _ = m["iss"].(string)
	i.Subject, _ = m["sub"].(string)
	switch aud := m["aud"].(type) {
	case string:
		i.Audience = []string{aud}
	case []any:
		for _, a := range aud {
			if s, ok := a.(string); ok {
				i.Audience = append(i.Audience, s)
			}
		}
	}
	i.Exp, i.Iat = numericDate(m["exp"]), numericDate(m["iat"])
	if t, ok := m[tenantClaim].(string); ok {
		i.Tenant = t
	}
	if p, err := authz.PrincipalFromClaims(m, authz.ClaimNames{Tenant: tenantClaim}); err == nil {
		i.Scopes = authz.ScopeStrings(p.Scopes)
	} else if s, ok := m["scope"].(string); ok {
		i.Scopes = strings.Fields(s)
	}
	return i, m, nil
}

func numericDate(v any) time.Time {
	n, ok := v.(json.Number)
	if !ok {
		return time.Time{}
	}
	f, err := n.Float64()
	if err != nil || f <= 0 || f > 1e11 {
		return time.Time{}
	}
	return time.Unix(int64(f), 0)
}

// checkAccessToken refuses, before anything is stored, an access token that cannot work against
// the server: not a JWT (the server verifies JWTs only), another issuer, an aud without our
// resource, no tenant claim, or times that only a wrong clock explains. Each of these would
// otherwise surface later as a bare 401 on every command; here the person learns what the IdP
// (or the clock) must fix, in one line.
func checkAccessToken(tok, issuer, resource, tenantClaim string, now time.Time) (*tokenInfo, error) {
	const pre = "login: the identity provider's access token will not work with this server: "
	i, m, err := readTokenInfo(tok, tenantClaim)
	if err != nil {
		return nil, fmt.Errorf(pre+"%v; the IdP must issue JWT access tokens for resource %s; nothing was stored", err, resource)
	}
	if strings.TrimSuffix(i.Issuer, "/") != strings.TrimSuffix(issuer, "/") {
		return nil, fmt.Errorf(pre+"its iss is %q, not %s; nothing was stored", i.Issuer, issuer)
	}
	if !slices.ContainsFunc(i.Audience, func(a string) bool { return sameURL(a, resource) }) {
		return nil, fmt.Errorf(pre+"its aud %v lacks the resource %s (does the IdP honour the RFC 8707 resource parameter, or map this client to that audience?); nothing was stored",
			i.Audience, resource)
	}
	if _, err := authz.PrincipalFromClaims(m, authz.ClaimNames{Tenant: tenantClaim}); err != nil {
		return nil, fmt.Errorf(pre+"%s (configure the IdP to put the tenant in the %q claim, or pass --tenant-claim); nothing was stored",
			strings.TrimPrefix(err.Error(), authz.ErrInvalidToken.Error()+": "), tenantClaim)
	}
	if !i.Iat.IsZero() && i.Iat.Sub(now).Abs() > skewLeeway {
		return nil, fmt.Errorf("login: clock skew: the identity provider issued the token at %s, but this machine's clock says %s; fix the clock; nothing was stored",
			i.Iat.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if !i.Exp.IsZero() && now.Sub(i.Exp) > skewLeeway {
		return nil, fmt.Errorf("login: the access token expired at %s, before it arrived (this machine says %s): check the clocks; nothing was stored",
			i.Exp.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return i, nil
}

const whoamiSummary = `Shows who the client commands act as against --url: the token's issuer, subject, tenant,
scopes and expiry. The token is the one the commands would use (--token, --token-file,
JOBGATE_TOKEN, else the 'jobgate login' of --url, refreshed first if it expired). Its claims are
read without verifying the signature: this is a display; the server verifies it on every call.`

func runWhoami(args []string, stdout, stderr io.Writer) error {
	c := newClientCommand("whoami", whoamiSummary, stderr)
	c.jsonHelp("print the claims as JSON")
	if err := noArgs(c.FlagSet, args); err != nil {
		return err
	}
	src, err := c.conn.tokenSource()
	if err != nil {
		return err
	}
	tok, err := src.Token()
	if err != nil {
		return err
	}
	claim := authz.TenantClaimDefault
	if src.login != nil && src.login.TenantClaim != "" {
		claim = src.login.TenantClaim
	}
	i, _, err := readTokenInfo(tok.AccessToken, claim)
	if err != nil {
		return fmt.Errorf("whoami: the token is %v", err)
	}
	if c.asJSON {
		out := map[string]any{"issuer": i.Issuer, "subject": i.Subject, "tenant": i.Tenant, "scopes": i.Scopes,
			"audience": i.Audience, "expires_at": i.Exp.UTC(), "source": src.desc, "verified": false}
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	exp := "none"
	if !i.Exp.IsZero() {
		exp = i.Exp.Local().Format(time.RFC3339)
		if d := time.Until(i.Exp); d > 0 {
			exp += " (in " + shortDuration(d) + ")"
		} else {
			exp += " (expired)"
		}
	}
	tenant := i.Tenant
	if tenant == "" {
		tenant = fmt.Sprintf("none (no %q claim: the server will refuse this token)", claim)
	}
	for _, row := range [][2]string{
		{"issuer", i.Issuer}, {"subject", i.Subject}, {"tenant", tenant},
		{"scopes", orNone(i.Scopes)}, {"audience", strings.Join(i.Audience, " ")}, {"expires", exp}, {"token", src.desc},
	} {
		// Claims are the IdP's (or a token's forger's) text: no control characters to the terminal.
		fmt.Fprintf(stdout, "%-9s %s\n", row[0]+":", cleanText(row[1]))
	}
	fmt.Fprintln(stdout, "(claims read from the token without verifying it; the server verifies it on every call)")
	return nil
}

const logoutSummary = `Signs out of the 'jobgate login' of --url: revokes the refresh token at the identity provider
(RFC 7009) when it offers revocation, then deletes the stored tokens. Offline, or when the
revocation fails, the tokens are deleted anyway and logout says so.`

func runLogout(args []string, stdout, stderr io.Writer) error {
	var u string
	fs := newFlagSet("logout", logoutSummary, stderr)
	fs.StringVar(&u, "url", envOr("JOBGATE_URL", defaultURL), "MCP endpoint to sign out of (env JOBGATE_URL)")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	path, err := tokenStorePath()
	if err != nil {
		return err
	}
	tf, err := loadTokens(path)
	if err != nil {
		return err
	}
	l := tf.forURL(u)
	if l == nil {
		fmt.Fprintf(stdout, "Not signed in for %s; nothing to do.\n", u)
		return nil
	}
	login := *l
	revoked := "the identity provider offers no revocation endpoint, so the tokens stay valid until they expire"
	if login.RevocationEndpoint != "" && login.RefreshToken != "" {
		if err := revoke(login); err != nil {
			revoked = "revocation failed (" + cleanText(err.Error()) + "); the refresh token may stay valid until it expires"
		} else {
			revoked = "refresh token revoked"
		}
	} else if login.RefreshToken == "" {
		revoked = "there was no refresh token to revoke"
	}
	tf.remove(login.Issuer, login.Resource)
	if err := saveTokens(path, tf); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Signed out of %s for %s: %s; stored tokens deleted.\n", login.Issuer, login.Resource, revoked)
	return nil
}
