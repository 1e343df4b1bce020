package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"
)

func oauthConfig(m *serverMetadata, clientID, secret string, scopes []string) *oauth2.Config {
	style := oauth2.AuthStyleInParams // a public client sends only its client_id
	if secret != "" {
		style = oauth2.AuthStyleAutoDetect
	}
	return &oauth2.Config{
		ClientID: clientID, ClientSecret: secret, Scopes: scopes,
		Endpoint: oauth2.Endpoint{AuthURL: m.AuthorizationEndpoint, TokenURL: m.TokenEndpoint,
			DeviceAuthURL: m.DeviceAuthorizationEndpoint, AuthStyle: style},
	}
}

// idpContext carries the HTTP client x/oauth2 uses for the IdP's endpoints: see idpTransport.
func idpContext(ctx context.Context, m *serverMetadata, clientID, secret, resource string) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Timeout: loginHTTPTimeout, Transport: &idpTransport{
		base: http.DefaultTransport, tokenURL: m.TokenEndpoint, deviceURL: m.DeviceAuthorizationEndpoint,
		clientID: clientID, secret: secret, resource: resource}})
}

// idpTransport adds to each form POST to the token and device authorization endpoints what
// x/oauth2 cannot be told to send there: the RFC 8707 resource indicator (x/oauth2 has no
// option for it on refresh), so a standard IdP puts the server's resource URI in aud on every
// token, refreshed ones included; and, for a confidential client, its credentials on the
// device authorization request (RFC 8628 §3.1), which x/oauth2 sends with the client_id only.
type idpTransport struct {
	base                                            http.RoundTripper
	tokenURL, deviceURL, clientID, secret, resource string
}

func (t *idpTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	u := r.URL.String()
	isToken, isDevice := u == t.tokenURL, t.deviceURL != "" && u == t.deviceURL
	if r.Method != http.MethodPost || (!isToken && !isDevice) || r.Body == nil {
		return t.base.RoundTrip(r)
	}
	b, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	form, err := url.ParseQuery(string(b))
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	if t.resource != "" && form.Get("resource") == "" {
		form.Set("resource", t.resource)
	}
	if isDevice && r.Header.Get("Authorization") == "" {
		clientAuth(r, form, t.clientID, t.secret)
	}
	setForm(r, form)
	return t.base.RoundTrip(r)
}

// revoke is an RFC 7009 request for the login's refresh token, authenticated as its client.
func revoke(l storedLogin) error {
	if err := secureURL("revocation_endpoint", l.RevocationEndpoint); err != nil {
		return err // login checked it; the file may be older or edited
	}
	secret, err := readClientSecret(l.ClientSecretFile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.RevocationEndpoint, nil)
	if err != nil {
		return err
	}
	form := url.Values{"token": {l.RefreshToken}, "token_type_hint": {"refresh_token"}}
	clientAuth(req, form, l.ClientID, secret)
	setForm(req, form)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s", resp.Status, b)
	}
	return nil
}

// clientAuth authenticates a form POST to the IdP as the client: a confidential client's ID
// and secret in Basic, each form-urlencoded first (RFC 6749 §2.3.1), and no client_secret in
// the form; a public client names itself with client_id in the form.
func clientAuth(r *http.Request, form url.Values, clientID, secret string) {
	if secret == "" {
		form.Set("client_id", clientID)
		return
	}
	r.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(secret))
	form.Del("client_secret")
}

// setForm makes form, encoded, r's body (re-sendable: GetBody).
func setForm(r *http.Request, form url.Values) {
	enc := form.Encode()
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Body = io.NopCloser(strings.NewReader(enc))
	r.ContentLength = int64(len(enc))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(enc)), nil }
}

// deviceLogin runs the device authorization grant: it prints where to go and the code, then
// polls at the interval the IdP asks for (slower on slow_down) until the person answers or the
// code expires.
func deviceLogin(ctx context.Context, cfg *oauth2.Config, m *serverMetadata, stdout io.Writer) (*oauth2.Token, error) {
	if m.DeviceAuthorizationEndpoint == "" {
		return nil, fmt.Errorf("login: %s offers no device authorization (RFC 8628); sign in with --browser", m.Issuer)
	}
	da, err := cfg.DeviceAuth(ctx)
	if err != nil {
		return nil, idpError("device authorization", cfg.ClientID, err)
	}
	if da.VerificationURI == "" || da.UserCode == "" || da.DeviceCode == "" {
		return nil, fmt.Errorf("login: %s answered the device authorization without a verification_uri, user_code or device_code", m.Issuer)
	}
	// The IdP's text goes to a terminal: cleanText drops control characters, so an IdP (or
	// whoever answers in its place) cannot send escape sequences that rewrite the screen, the
	// window title or the clipboard.
	var b strings.Builder
	fmt.Fprintf(&b, "To sign in, open\n\n    %s\n\nand enter the code\n\n    %s\n\n", cleanText(da.VerificationURI), cleanText(da.UserCode))
	if da.VerificationURIComplete != "" {
		fmt.Fprintf(&b, "(or open %s)\n", cleanText(da.VerificationURIComplete))
	}
	if !da.Expiry.IsZero() {
		fmt.Fprintf(&b, "Waiting for you to approve (the code expires in %s)...\n", shortDuration(time.Until(da.Expiry).Round(time.Second)))
	}
	fmt.Fprint(stdout, b.String())
	tok, err := cfg.DeviceAccessToken(ctx, da)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// x/oauth2 stops polling at the code's expiry by its own deadline.
			return nil, errors.New("login: the device code expired before it was approved; run 'jobgate login' again")
		}
		if ctx.Err() != nil {
			return nil, errors.New("login: stopped; nothing was stored")
		}
		return nil, idpError("device sign-in", cfg.ClientID, err)
	}
	return tok, nil
}
