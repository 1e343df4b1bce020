package devidp

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// Dynamic client registration (RFC 7591). pkg/op has no registration
// endpoint (its DiscoveryConfiguration only has the field), and MCP clients
// (the TypeScript SDK, Claude Code) refuse an authorization server without
// one. So this file adds the smallest safe one: public native clients only
// (token_endpoint_auth_method "none", PKCE enforced by pkg/op), redirect URIs
// on loopback http or https, code and refresh grants. Registered clients are
// kept in <Dir>/clients.json and survive restarts.

const (
	clientsFile     = "clients.json"
	maxRegisterBody = 16 << 10
	maxClients      = 1000 // a dev box; a runaway script should not fill the disk
	maxRedirectURIs = 10
)

// registration is the RFC 7591 metadata this provider reads and answers.
type registration struct {
	ClientID         string `json:"client_id,omitempty"`
	ClientIDIssuedAt int64  `json:"client_id_issued_at,omitempty"`
	clientMetadata
	Scope string `json:"scope,omitempty"`
	// UsedAt is when the client was first issued a token (Unix seconds; 0 = never): a client
	// never used expires (Options.UnusedClientTTL). Kept in clients.json, never in an answer.
	UsedAt int64 `json:"jobgate_used_at,omitempty"`
}

type regError struct{ code, desc string }

func (e *regError) Error() string { return e.code + ": " + e.desc }

func badMeta(format string, a ...any) *regError {
	return &regError{"invalid_client_metadata", fmt.Sprintf(format, a...)}
}

// validateRegistration checks and normalizes a request; errors name the field.
func validateRegistration(r *registration) error {
	if r.ClientID != "" {
		return badMeta("client_id: chosen by the server, leave it out")
	}
	switch r.TokenEndpointAuthMethod {
	case "", string(oidc.AuthMethodNone):
		r.TokenEndpointAuthMethod = string(oidc.AuthMethodNone)
	default:
		return badMeta("token_endpoint_auth_method: only \"none\" (public client with PKCE) is supported")
	}
	if p := r.checkFlows(false); p != nil {
		if p.redirect {
			return &regError{"invalid_redirect_uri", p.msg}
		}
		return badMeta("%s", p.msg)
	}
	if len(r.ClientName) > 200 {
		return badMeta("client_name: at most 200 characters")
	}
	return nil
}

// clientMetadata is the RFC 7591 client metadata both ways of naming a client carry: a
// registration (/register) and a metadata document (CIMD). Both are checked by checkFlows.
type clientMetadata struct {
	ClientName              string   `json:"client_name,omitempty"`
	RedirectURIs            []string `json:"redirect_uris"`
	GrantTypes              []string `json:"grant_types,omitempty"`
	ResponseTypes           []string `json:"response_types,omitempty"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method,omitempty"`
}

// metaProblem is what checkFlows found wrong: the message names the field; redirect says it
// is about redirect_uris (RFC 7591 answers those with invalid_redirect_uri).
type metaProblem struct {
	redirect bool
	msg      string
}

// checkFlows checks the redirect URIs (1 to maxRedirectURIs, each checkRedirectURI), the
// grant types (authorization_code and refresh_token, and the device grant if device; absent:
// code and refresh; one that starts a sign-in required) and the response types (code only;
// absent: code), filling in the defaults.
func (m *clientMetadata) checkFlows(device bool) *metaProblem {
	if len(m.RedirectURIs) == 0 || len(m.RedirectURIs) > maxRedirectURIs {
		return &metaProblem{true, fmt.Sprintf("redirect_uris: 1 to %d URIs required", maxRedirectURIs)}
	}
	for _, u := range m.RedirectURIs {
		if err := checkRedirectURI(u); err != nil {
			return &metaProblem{true, "redirect_uris: " + err.Error()}
		}
	}
	if len(m.GrantTypes) == 0 {
		m.GrantTypes = []string{string(oidc.GrantTypeCode), string(oidc.GrantTypeRefreshToken)}
	}
	supported, starts := "authorization_code, refresh_token", "authorization_code"
	if device {
		supported, starts = supported+", "+string(oidc.GrantTypeDeviceCode), starts+" or the device grant"
	}
	started := false
	for _, g := range m.GrantTypes {
		switch gt := oidc.GrantType(g); {
		case gt == oidc.GrantTypeCode || device && gt == oidc.GrantTypeDeviceCode:
			started = true
		case gt == oidc.GrantTypeRefreshToken:
		default:
			return &metaProblem{false, fmt.Sprintf("grant_types: %q is not supported (%s)", g, supported)}
		}
	}
	if !started {
		return &metaProblem{false, "grant_types: " + starts + " is required"}
	}
	if len(m.ResponseTypes) == 0 {
		m.ResponseTypes = []string{string(oidc.ResponseTypeCode)}
	}
	for _, rt := range m.ResponseTypes {
		if rt != string(oidc.ResponseTypeCode) {
			return &metaProblem{false, fmt.Sprintf("response_types: %q is not supported (code)", rt)}
		}
	}
	return nil
}

// checkRedirectURI: https anywhere, or http on a loopback host (RFC 8252 §7.3); no fragment.
func checkRedirectURI(s string) error {
	u, err := url.Parse(s)
	if err != nil || !u.IsAbs() || u.Host == "" {
		return fmt.Errorf("%q is not an absolute URL", s)
	}
	if u.Fragment != "" || strings.Contains(s, "#") {
		return fmt.Errorf("%q has a fragment", s)
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && authz.LoopbackHost(u.Hostname()):
		return nil
	}
	return fmt.Errorf("%q: https, or http on localhost/127.0.0.1/[::1] only", s)
}

func (s *storage) clientFromRegistration(r registration) *client {
	gts := make([]oidc.GrantType, len(r.GrantTypes))
	for i, g := range r.GrantTypes {
		gts[i] = oidc.GrantType(g)
	}
	name := "a dynamically registered client without a name"
	if r.ClientName != "" {
		// Anyone may register any name: say so where a person reads it.
		name = fmt.Sprintf("%q (the name it registered itself under)", r.ClientName)
	}
	return &client{
		id: r.ClientID, name: name, redirectURIs: r.RedirectURIs,
		// Native: pkg/op then accepts the loopback redirect on any port and https as registered.
		appType: op.ApplicationTypeNative, authMethod: oidc.AuthMethodNone,
		grantTypes: gts, loginURL: s.loginURL, reg: &r,
	}
}

func (s *storage) register(r registration) (registration, error) {
	r.UsedAt = 0 // the server's to set
	if err := validateRegistration(&r); err != nil {
		return r, err
	}
	r.ClientID = "dcr-" + randomID()
	r.ClientIDIssuedAt = s.now().Unix()
	s.clientsMu.Lock()
	defer s.clientsMu.Unlock()
	s.sweepLocked()
	if len(s.clients) >= maxClients {
		return r, &regError{"invalid_client_metadata", "too many registered clients; remove " + clientsFile + " from the dev data dir"}
	}
	s.clients[r.ClientID] = s.clientFromRegistration(r)
	if err := s.saveClientsLocked(); err != nil {
		delete(s.clients, r.ClientID)
		return r, err
	}
	return r, nil
}

// expiredLocked: a registered client never issued a token, registered over
// unusedClientTTL before now. Built-in clients never expire.
func (s *storage) expiredLocked(c *client, now time.Time) bool {
	return c.reg != nil && c.reg.UsedAt == 0 && now.Sub(time.Unix(c.reg.ClientIDIssuedAt, 0)) > s.unusedClientTTL
}

// sweepLocked drops the expired clients from memory; it reports whether it dropped any (the
// caller saves clients.json).
func (s *storage) sweepLocked() bool {
	now, swept := s.now(), false
	for id, c := range s.clients {
		if s.expiredLocked(c, now) {
			delete(s.clients, id)
			swept = true
		}
	}
	return swept
}

// markUsed records the first token issued to a registered client, so it no longer expires.
// Written once per client: later tokens change nothing.
func (s *storage) markUsed(id string) error {
	s.clientsMu.Lock()
	defer s.clientsMu.Unlock()
	c, ok := s.clients[id]
	if !ok || c.reg == nil || c.reg.UsedAt != 0 {
		return nil
	}
	c.reg.UsedAt = s.now().Unix()
	if err := s.saveClientsLocked(); err != nil {
		c.reg.UsedAt = 0
		return err
	}
	return nil
}

func (s *storage) saveClientsLocked() error {
	var regs []registration
	for _, c := range s.clients {
		if c.reg != nil {
			regs = append(regs, *c.reg)
		}
	}
	slices.SortFunc(regs, func(a, b registration) int { return strings.Compare(a.ClientID, b.ClientID) })
	return s.writeJSON(clientsFile, regs)
}

func (s *storage) loadClients() error {
	var regs []registration
	if err := s.readJSON(clientsFile, &regs); err != nil {
		return err
	}
	for _, r := range regs {
		id := r.ClientID
		r.ClientID = ""
		if err := validateRegistration(&r); err != nil || !strings.HasPrefix(id, "dcr-") {
			return fmt.Errorf("devidp: %s: client %q: invalid (%v)", clientsFile, id, err)
		}
		r.ClientID = id
		s.clients[id] = s.clientFromRegistration(r)
	}
	if s.sweepLocked() {
		return s.saveClientsLocked()
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (i *IdP) registerHandler(w http.ResponseWriter, r *http.Request) {
	// A page on another site can POST text/plain or a form without a CORS preflight (no-cors)
	// and registered a client per request, up to maxClients, for good. application/json needs
	// a preflight, which gets no CORS answer, and a browser names the page's origin: only the
	// provider's own (its pages) or none (a native client, a script) may register.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeJSON(w, http.StatusUnsupportedMediaType, map[string]string{"error": "invalid_client_metadata",
			"error_description": fmt.Sprintf("Content-Type: %q is not application/json", r.Header.Get("Content-Type"))})
		return
	}
	if o := r.Header.Get("Origin"); o != "" && o != i.origin {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "access_denied",
			"error_description": fmt.Sprintf("Origin: %q may not register clients (only %s, or no Origin)", o, i.origin)})
		return
	}
	var req registration
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRegisterBody))
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_client_metadata", "error_description": "body: not a JSON object of client metadata"})
		return
	}
	out, err := i.store.register(req)
	var re *regError
	switch {
	case errors.As(err, &re):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": re.code, "error_description": re.desc})
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "server_error", "error_description": "could not store the client"})
	default:
		writeJSON(w, http.StatusCreated, out)
	}
}

// discoveryHandler serves pkg/op's discovery document plus the
// registration_endpoint and client_id_metadata_document_supported pkg/op does not know about. It answers both the OIDC
// location (<issuer>/.well-known/openid-configuration) and the RFC 8414 one
// (/.well-known/oauth-authorization-server<issuer path>), which MCP clients try first.
func (i *IdP) discoveryHandler(w http.ResponseWriter, r *http.Request) {
	ctx := op.ContextWithIssuer(r.Context(), i.issuer)
	cfg := op.CreateDiscoveryConfig(ctx, i.provider, i.store)
	cfg.RegistrationEndpoint = i.issuer + "/register"
	// pkg/op's struct has no member for it: an https client_id URL names a Client ID Metadata
	// Document (cimd.go), which MCP clients prefer to /register when this says so.
	doc := struct {
		*oidc.DiscoveryConfiguration
		CIMD bool `json:"client_id_metadata_document_supported"`
	}{cfg, true}
	w.Header().Set("Access-Control-Allow-Origin", "*") // public metadata; browser-based MCP clients read it
	writeJSON(w, http.StatusOK, doc)
}
