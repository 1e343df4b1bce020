package devidp

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/jobgate/jobgate/authz"
)

// Lifetimes of what the provider hands out. Auth requests and codes stay in
// memory (a login in flight does not survive a restart); refresh tokens are
// written to the data dir so a CLI login survives `jobgate dev` restarting.
const (
	AccessTokenTTL  = time.Hour
	RefreshTokenTTL = 30 * 24 * time.Hour
	authRequestTTL  = 10 * time.Minute
	refreshFile     = "refresh-tokens.json"
)

// storage implements op.Storage (plus CanGetPrivateClaimsFromRequest and
// CanSetUserinfoFromRequest) for the dev provider.
type storage struct {
	resource string
	dir      string // "" = ephemeral
	now      func() time.Time
	key      *signingKey
	users    map[string]User
	loginURL func(string) string
	cimd     *cimdResolver // clients named by an https client_id URL (cimd.go)

	clientsMu       sync.RWMutex
	clients         map[string]*client
	unusedClientTTL time.Duration // Options.UnusedClientTTL

	mu        sync.Mutex
	authReqs  map[string]*authRequest
	codes     map[string]string // code -> auth request id
	refresh   map[string]*refreshToken
	devices   map[string]*deviceEntry // device code -> entry
	userCodes map[string]string       // normalized user code -> device code
}

var (
	_ op.Storage                        = (*storage)(nil)
	_ op.CanGetPrivateClaimsFromRequest = (*storage)(nil)
	_ op.CanSetUserinfoFromRequest      = (*storage)(nil)
)

// authRequest is one /authorize in flight; it implements op.AuthRequest.
type authRequest struct {
	id, clientID, redirectURI, state, nonce string
	scopes                                  []string
	responseType                            oidc.ResponseType
	responseMode                            oidc.ResponseMode
	challenge                               *oidc.CodeChallenge
	audience                                []string
	created                                 time.Time

	// Set by the picker.
	subject  string
	authTime time.Time
	done     bool
}

func (a *authRequest) GetID() string                         { return a.id }
func (a *authRequest) GetACR() string                        { return "" }
func (a *authRequest) GetAMR() []string                      { return amrOf(a.done) }
func (a *authRequest) GetAudience() []string                 { return a.audience }
func (a *authRequest) GetAuthTime() time.Time                { return a.authTime }
func (a *authRequest) GetClientID() string                   { return a.clientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge { return a.challenge }
func (a *authRequest) GetNonce() string                      { return a.nonce }
func (a *authRequest) GetRedirectURI() string                { return a.redirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType    { return a.responseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode    { return a.responseMode }
func (a *authRequest) GetScopes() []string                   { return a.scopes }
func (a *authRequest) GetState() string                      { return a.state }
func (a *authRequest) GetSubject() string                    { return a.subject }
func (a *authRequest) Done() bool                            { return a.done }

// amrOf: the picker is the only authentication method ("dev"): no password,
// no second factor. A later page that demands a stronger amr refuses it.
func amrOf(done bool) []string {
	if !done {
		return nil
	}
	return []string{"dev"}
}

func tokenHash(token string) string {
	h := sha256.Sum256([]byte(token))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

func randomID() string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// audience: aud holds the resource URI (what authz.JWKSVerifier checks) and
// the client id (what an OIDC relying party checks on the ID token).
func (s *storage) audience(clientID string) []string { return []string{s.resource, clientID} }

func (s *storage) CreateAuthRequest(_ context.Context, ar *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	// No SSO session is kept: every authorize shows the picker, so prompt=none can never succeed.
	if slices.Contains(ar.Prompt, oidc.PromptNone) {
		return nil, oidc.ErrLoginRequired()
	}
	c, ok := s.client(ar.ClientID)
	if !ok {
		return nil, oidc.ErrInvalidClient().WithDescription("unknown client_id")
	}
	scopes := slices.Clone([]string(ar.Scopes))
	// MCP clients (the TS SDK, Claude Code) do not ask for offline_access, yet
	// must be able to refresh: pkg/op only issues a refresh token when the
	// stored scopes contain it.
	if c.allows(oidc.GrantTypeRefreshToken) && !slices.Contains(scopes, oidc.ScopeOfflineAccess) {
		scopes = append(scopes, oidc.ScopeOfflineAccess)
	}
	a := &authRequest{
		id: randomID(), clientID: ar.ClientID, redirectURI: ar.RedirectURI, state: ar.State, nonce: ar.Nonce,
		scopes: scopes, responseType: ar.ResponseType, responseMode: ar.ResponseMode,
		audience: s.audience(ar.ClientID), created: s.now(),
	}
	if ar.CodeChallenge != "" || ar.CodeChallengeMethod != "" {
		// Discovery promises S256 only; pkg/op would still accept plain (and a missing method,
		// which RFC 7636 §4.3 reads as plain), whose verifier is the challenge itself.
		if ar.CodeChallengeMethod != oidc.CodeChallengeMethodS256 {
			return nil, oidc.ErrInvalidRequest().WithDescription("code_challenge_method: only S256 is supported, not %q", ar.CodeChallengeMethod)
		}
		if ar.CodeChallenge == "" {
			return nil, oidc.ErrInvalidRequest().WithDescription("code_challenge: required with code_challenge_method")
		}
		a.challenge = &oidc.CodeChallenge{Challenge: ar.CodeChallenge, Method: ar.CodeChallengeMethod}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gcLocked()
	s.authReqs[a.id] = a
	return a, nil
}

// gcLocked drops auth requests (and their codes) older than authRequestTTL.
func (s *storage) gcLocked() {
	cut := s.now().Add(-authRequestTTL)
	for id, a := range s.authReqs {
		if a.created.Before(cut) {
			delete(s.authReqs, id)
		}
	}
	for code, id := range s.codes {
		if _, ok := s.authReqs[id]; !ok {
			delete(s.codes, code)
		}
	}
}

var errNotFound = errors.New("not found")

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.authReqs[id]
	if !ok || a.created.Before(s.now().Add(-authRequestTTL)) {
		return nil, fmt.Errorf("auth request %w", errNotFound)
	}
	return a, nil
}

func (s *storage) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	id, ok := s.codes[code]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("code %w", errNotFound)
	}
	a, err := s.AuthRequestByID(ctx, id)
	if err != nil {
		return nil, err
	}
	// The last word before a code is redeemed: only an S256 challenge is ever verified, should
	// a plain one have been stored by any path (CreateAuthRequest refuses it).
	if ch := a.GetCodeChallenge(); ch != nil && ch.Method != oidc.CodeChallengeMethodS256 {
		return nil, errors.New("code_challenge_method: only S256 is supported")
	}
	return a, nil
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.authReqs[id]; !ok {
		return fmt.Errorf("auth request %w", errNotFound)
	}
	s.codes[code] = id
	return nil
}

// DeleteAuthRequest is called once the code is exchanged: the code cannot be used twice.
func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.authReqs, id)
	for code, rid := range s.codes {
		if rid == id {
			delete(s.codes, code)
		}
	}
	return nil
}

// completeAuth is the picker's POST: the request is now done for subject.
func (s *storage) completeAuth(id, subject string) error {
	if _, ok := s.users[subject]; !ok {
		return fmt.Errorf("user %w", errNotFound)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.authReqs[id]
	if !ok || a.created.Before(s.now().Add(-authRequestTTL)) {
		return fmt.Errorf("auth request %w", errNotFound)
	}
	a.subject, a.authTime, a.done = subject, s.now(), true
	return nil
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) { return s.key, nil }
func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}
func (s *storage) KeySet(context.Context) ([]op.Key, error) { return []op.Key{publicKey{s.key}}, nil }

// client is the client id names; a registered one past its unused TTL is gone already, though
// the next registration or restart only then sweeps it out of clients.json. A URL client_id
// is resolved through its metadata document (cimd.go).
func (s *storage) client(id string) (*client, bool) {
	c, err := s.clientErr(context.Background(), id)
	return c, err == nil
}

// clientErr is client with the reason a URL client_id cannot be used (a *cimdError).
func (s *storage) clientErr(ctx context.Context, id string) (*client, error) {
	if urlClientID(id) {
		return s.cimd.resolve(ctx, id)
	}
	c, ok := s.registered(id)
	if !ok {
		return nil, errNotFound
	}
	return c, nil
}

// registered is a built-in or dynamically registered client.
func (s *storage) registered(id string) (*client, bool) {
	s.clientsMu.RLock()
	defer s.clientsMu.RUnlock()
	c, ok := s.clients[id]
	if ok && s.expiredLocked(c, s.now()) {
		return nil, false
	}
	return c, ok
}

func (s *storage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.clientErr(ctx, id)
	var ce *cimdError
	if errors.As(err, &ce) {
		return nil, oidc.ErrInvalidClient().WithDescription("%s", ce.desc).WithParent(err)
	}
	if err != nil {
		// An *oidc.Error: pkg/op passes it through, so the token endpoint
		// answers invalid_client instead of a 500 server_error.
		return nil, oidc.ErrInvalidClient().WithDescription("unknown client_id").WithParent(errNotFound)
	}
	return c, nil
}

// AuthorizeClientIDSecret checks a confidential client's secret (only
// jobgate-pages has one) in constant time. An *oidc.Error, so the token
// endpoint answers invalid_client.
func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	c, ok := s.client(id)
	if !ok || c.secret == "" || subtle.ConstantTimeCompare([]byte(c.secret), []byte(secret)) != 1 {
		return oidc.ErrInvalidClient().WithDescription("client authentication failed")
	}
	return nil
}

func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

func (s *storage) SetUserinfoFromRequest(_ context.Context, ui *oidc.UserInfo, req op.IDTokenRequest, _ []string) error {
	ui.Subject = req.GetSubject()
	return nil
}

func (s *storage) SetUserinfoFromToken(_ context.Context, ui *oidc.UserInfo, _, subject, _ string) error {
	ui.Subject = subject
	return nil
}

func (s *storage) SetIntrospectionFromToken(_ context.Context, ir *oidc.IntrospectionResponse, _, subject, clientID string) error {
	ir.Subject, ir.ClientID = subject, clientID
	return nil
}

func (s *storage) GetPrivateClaimsFromRequest(_ context.Context, req op.TokenRequest, scopes []string) (map[string]any, error) {
	return s.privateClaims(req.GetSubject(), scopes)
}

func (s *storage) GetPrivateClaimsFromScopes(_ context.Context, userID, _ string, scopes []string) (map[string]any, error) {
	return s.privateClaims(userID, scopes)
}

// privateClaims are the access token's tenant and scope claims. scope is the
// requested jobs:* scopes the user holds; a request naming none of them (a
// plain OIDC client) gets all of the user's scopes. It is a space-separated
// string (RFC 9068 §2.2.3), the form authz reads.
func (s *storage) privateClaims(subject string, requested []string) (map[string]any, error) {
	u, ok := s.users[subject]
	if !ok {
		return nil, fmt.Errorf("user %w", errNotFound)
	}
	asked := slices.ContainsFunc(requested, func(r string) bool { return strings.HasPrefix(r, "jobs:") })
	var granted []string
	for _, sc := range u.Scopes {
		if !asked || slices.Contains(requested, string(sc)) {
			granted = append(granted, string(sc))
		}
	}
	return map[string]any{authz.TenantClaimDefault: u.Tenant, "scope": strings.Join(granted, " ")}, nil
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("devidp: JWT profile grant is not supported")
}

func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errors.New("devidp: JWT profile grant is not supported")
}

func (s *storage) Health(context.Context) error { return nil }

// readJSON decodes the file name of the storage directory into v; without a directory, or
// before the file exists, it leaves v alone.
func (s *storage) readJSON(name string, v any) error {
	if s.dir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(s.dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("devidp: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("devidp: %s: %w", name, err)
	}
	return nil
}

// writeJSON is readJSON's counterpart: v as indented JSON in the data directory under name,
// written atomically with mode 0600 (writeFileAtomic); without a data directory, nothing.
func (s *storage) writeJSON(name string, v any) error {
	if s.dir == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(s.dir, name), b)
}
