package devidp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/jobgate/jobgate/authz"
)

type deviceDiscovery struct {
	DeviceEndpoint string   `json:"device_authorization_endpoint"`
	GrantTypes     []string `json:"grant_types_supported"`
}

const grantDevice = "urn:ietf:params:oauth:grant-type:device_code"

// pollOnce is one RFC 8628 §3.4 token request; it returns the token or the OAuth error code.
func pollOnce(t *testing.T, tokenURL, deviceCode string) (map[string]any, string) {
	t.Helper()
	resp, err := http.PostForm(tokenURL, url.Values{"grant_type": {grantDevice}, "device_code": {deviceCode}, "client_id": {CLIClientID}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("token response %s: %s", resp.Status, b)
	}
	if e, ok := m["error"].(string); ok {
		return nil, e
	}
	return m, ""
}

// approveDevice opens the verification URI, checks the code form, then the
// picker for the code, and posts the given form fields (user=... or deny=1).
func (p *testIdP) approveDevice(t *testing.T, da *oauth2.DeviceAuthResponse, field, value string) *http.Response {
	t.Helper()
	if da.VerificationURI != p.issuer+"/device" {
		t.Fatalf("verification_uri %q", da.VerificationURI)
	}
	c := browser()
	resp := get(t, c, da.VerificationURI)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `name="user_code"`) || !strings.Contains(string(b), "Development only") {
		t.Fatalf("device code form: %s\n%s", resp.Status, b)
	}
	// Typed by a person: lower case, no dash.
	typed := strings.ToLower(strings.ReplaceAll(da.UserCode, "-", ""))
	resp = get(t, c, da.VerificationURI+"?user_code="+url.QueryEscape(typed))
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(b)
	csrf := reCSRF.FindStringSubmatch(page)
	if resp.StatusCode != 200 || csrf == nil || !strings.Contains(page, ">steward<") {
		t.Fatalf("device picker: %s\n%s", resp.Status, page)
	}
	resp, err := c.PostForm(da.VerificationURI, url.Values{"user_code": {typed}, "csrf": {csrf[1]}, field: {value}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestDeviceGrant: RFC 8628 end to end, approved through the device page;
// the token is verified by authz and can be refreshed; the device code gives
// tokens once.
func TestDeviceGrant(t *testing.T) {
	p := startIdP(t, t.TempDir())
	d := p.discover(t)
	var dd deviceDiscovery
	resp := get(t, http.DefaultClient, p.issuer+"/.well-known/openid-configuration")
	if err := json.NewDecoder(resp.Body).Decode(&dd); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if dd.DeviceEndpoint != p.issuer+"/device_authorization" || !slices.Contains(dd.GrantTypes, grantDevice) {
		t.Fatalf("discovery: %+v", dd)
	}
	ctx := context.Background()
	cfg := oauthConfig(d, "jobs:read", "jobs:approve")
	cfg.Endpoint.DeviceAuthURL = dd.DeviceEndpoint
	da, err := cfg.DeviceAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, e := pollOnce(t, d.TokenEndpoint, da.DeviceCode); e != "authorization_pending" {
		t.Fatalf("poll before approval: %q, want authorization_pending", e)
	}
	resp = p.approveDevice(t, da, "user", "steward")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "Signed in") {
		t.Fatalf("device approval: %s\n%s", resp.Status, b)
	}
	tok, e := pollOnce(t, d.TokenEndpoint, da.DeviceCode)
	if e != "" {
		t.Fatalf("poll after approval: %s", e)
	}
	v := verifier(t, p, d)
	checkAccess(t, v, tok["access_token"].(string), "steward", "acme", authz.ScopeApprove)
	rt, _ := tok["refresh_token"].(string)
	if rt == "" {
		t.Fatal("device grant gave no refresh token")
	}
	if _, e := pollOnce(t, d.TokenEndpoint, da.DeviceCode); e == "" {
		t.Fatal("a device code gave tokens twice")
	}
	tok2, err := refresh(ctx, cfg, rt)
	if err != nil {
		t.Fatal(err)
	}
	checkAccess(t, v, tok2.AccessToken, "steward", "acme", authz.ScopeApprove)
}

func TestDeviceDenied(t *testing.T) {
	p := startIdP(t, "")
	d := p.discover(t)
	cfg := oauthConfig(d, "jobs:read")
	cfg.Endpoint.DeviceAuthURL = p.issuer + "/device_authorization"
	da, err := cfg.DeviceAuth(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	resp := p.approveDevice(t, da, "deny", "1")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("deny: %s", resp.Status)
	}
	if _, e := pollOnce(t, d.TokenEndpoint, da.DeviceCode); e != "access_denied" {
		t.Fatalf("poll after deny: %q, want access_denied", e)
	}
	// A decided code cannot be approved afterwards.
	if err := p.store.completeDevice(da.UserCode, "ana", false); err == nil {
		t.Fatal("approved a denied device code")
	}
}

func TestDeviceExpired(t *testing.T) {
	srv := startIdPWith(t, Options{DeviceCodeLifetime: time.Nanosecond})
	d := srv.discover(t)
	cfg := oauthConfig(d, "jobs:read")
	cfg.Endpoint.DeviceAuthURL = srv.issuer + "/device_authorization"
	da, err := cfg.DeviceAuth(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, e := pollOnce(t, d.TokenEndpoint, da.DeviceCode); e != "expired_token" {
		t.Fatalf("poll of an expired code: %q, want expired_token", e)
	}
	if resp := get(t, browser(), da.VerificationURIComplete); resp.StatusCode != 400 {
		t.Fatalf("device page for an expired code: %s", resp.Status)
	}
	if err := srv.store.completeDevice(da.UserCode, "ana", false); err == nil {
		t.Fatal("approved an expired device code")
	}
}

func TestDevicePageRefusals(t *testing.T) {
	p := startIdP(t, "")
	cfg := oauthConfig(p.discover(t), "jobs:read")
	cfg.Endpoint.DeviceAuthURL = p.issuer + "/device_authorization"
	da, err := cfg.DeviceAuth(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := browser()
	for name, form := range map[string]url.Values{
		"no csrf":      {"user_code": {da.UserCode}, "user": {"ana"}},
		"other csrf":   {"user_code": {da.UserCode}, "user": {"ana"}, "csrf": {p.deviceCSRF("ZZZZ-ZZZZ")}},
		"unknown user": {"user_code": {da.UserCode}, "user": {"mallory"}, "csrf": {p.deviceCSRF(da.UserCode)}},
		"unknown code": {"user_code": {"ZZZZ-ZZZZ"}, "user": {"ana"}, "csrf": {p.deviceCSRF("ZZZZ-ZZZZ")}},
	} {
		resp, err := c.PostForm(p.issuer+"/device", form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("%s: %s, want a refusal", name, resp.Status)
		}
	}
	if _, e := pollOnce(t, p.issuer+"/oauth/token", da.DeviceCode); e != "authorization_pending" {
		t.Fatalf("after refused posts: %q, want authorization_pending", e)
	}
	if resp := get(t, c, p.issuer+"/device?user_code=ZZZZ-ZZZZ"); resp.StatusCode != 400 {
		t.Fatalf("device page for an unknown code: %s", resp.Status)
	}
}
