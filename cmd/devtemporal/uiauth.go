package devtemporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	uiconfig "github.com/temporalio/ui-server/v2/server/config"

	"github.com/jobgate/jobgate/authz"
)

// UIAuth signs people in to the Web UI with OpenID Connect: ui-server's auth provider, an
// authorization code flow of a confidential client, the callback at <UIURL>/auth/sso/callback.
// The UI then sends the signed-in user's access token (and ID token, as Authorization-Extras)
// to Options.UICodecEndpoint, which must be https: the UI passes tokens to https endpoints
// only, and to an http one it passes none and leaves every payload as stored.
//
// It is the embedded form of what a deployed Web UI is given as TEMPORAL_AUTH_ENABLED,
// TEMPORAL_AUTH_PROVIDER_URL, TEMPORAL_AUTH_CLIENT_ID, TEMPORAL_AUTH_CLIENT_SECRET,
// TEMPORAL_AUTH_SCOPES, TEMPORAL_AUTH_CALLBACK_URL and TEMPORAL_CODEC_PASS_ACCESS_TOKEN=true.
//
// ui-server (v2.55) sends no PKCE: the provider must let this confidential client redeem a
// code without one. It keeps its token verifier in a package variable: run one UI with
// UIAuth per process at a time.
type UIAuth struct {
	// ProviderURL is the OpenID Provider's issuer URL (its discovery document is at
	// <ProviderURL>/.well-known/openid-configuration and must name this very issuer). Required.
	ProviderURL string
	// ClientID and ClientSecret are the UI's client at the provider; its redirect URI is
	// <UIURL>/auth/sso/callback. ClientID is required.
	ClientID, ClientSecret string
	// Scopes are requested at sign-in. Defaults to openid, profile and email; add the scopes
	// the codec endpoint needs in the access token (jobgate: jobs:admin).
	Scopes []string
}

// checkUIAuth validates Options.UIAuth against the rest of the UI's options.
func (o *Options) checkUIAuth() error {
	a := o.UIAuth
	if a == nil {
		return nil
	}
	if o.UIPort == UIDisabled {
		return errors.New("devtemporal: Options.UIAuth is set but the UI is disabled (UIPort -1)")
	}
	u, err := url.Parse(a.ProviderURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("devtemporal: Options.UIAuth.ProviderURL %q: want the provider's issuer URL, http(s)://host[/path]", a.ProviderURL)
	}
	if a.ClientID == "" {
		return errors.New("devtemporal: Options.UIAuth.ClientID is required")
	}
	if o.UICodecEndpoint != "" && !strings.HasPrefix(o.UICodecEndpoint, "https://") {
		return fmt.Errorf("devtemporal: Options.UICodecEndpoint %q must be https with UIAuth: the UI passes the access token to https endpoints only", o.UICodecEndpoint)
	}
	return nil
}

// configure turns on the UI's sign-in in cfg, the UI being served at uiURL. ui-server looks the
// provider up when built and exits the process (log.Fatal) if that fails, so the discovery
// document is fetched and checked here first.
func (a *UIAuth) configure(ctx context.Context, cfg *uiconfig.Config, uiURL string) error {
	if err := checkDiscovery(ctx, a.ProviderURL); err != nil {
		return fmt.Errorf("Options.UIAuth.ProviderURL: %w", err)
	}
	scopes := a.Scopes
	if len(scopes) == 0 {
		scopes = []string{"openid", "profile", "email"}
	}
	cfg.Auth = uiconfig.Auth{Enabled: true, RedirectToProvider: true, Providers: []uiconfig.AuthProvider{{
		Label: "sso", Type: "oidc", ProviderURL: a.ProviderURL, ClientID: a.ClientID, ClientSecret: a.ClientSecret,
		Scopes: append([]string(nil), scopes...), CallbackURL: uiURL + "/auth/sso/callback",
	}}}
	cfg.Codec.PassAccessToken = cfg.Codec.Endpoint != ""
	return nil
}

// checkDiscovery fetches issuer's OpenID discovery document and checks it names issuer, as
// go-oidc's NewProvider (ui-server's) will.
func checkDiscovery(ctx context.Context, issuer string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	wellKnown := strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration"
	body, err := authz.FetchMetadata(ctx, http.DefaultClient, wellKnown)
	if err != nil {
		return fmt.Errorf("discovery %s: %w", wellKnown, err)
	}
	var d struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return fmt.Errorf("discovery %s: not JSON: %w", wellKnown, err)
	}
	if d.Issuer != issuer { // exactly, as go-oidc compares it
		return fmt.Errorf("discovery %s names issuer %q, not %q", wellKnown, d.Issuer, issuer)
	}
	return nil
}
