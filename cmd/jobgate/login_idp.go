package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"

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
	if isDevice && t.secret != "" && r.Header.Get("Authorization") == "" {
		// RFC 6749 §2.3.1: form-urlencode id and secret before Basic.
		r.SetBasicAuth(url.QueryEscape(t.clientID), url.QueryEscape(t.secret))
		form.Del("client_secret")
	}
	enc := form.Encode()
	r.Body = io.NopCloser(strings.NewReader(enc))
	r.ContentLength = int64(len(enc))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(enc)), nil }
	return t.base.RoundTrip(r)
}
