package devidp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// Refresh tokens: issued at every sign-in (offline_access is implied), rotated on every use,
// kept as SHA-256 hashes in memory and in refresh-tokens.json, revoked by family on reuse.

// refreshToken is the persisted state behind one refresh token. Only the
// token's SHA-256 is kept (in memory and in the data dir), so reading
// refresh-tokens.json does not give anyone a usable token.
//
// Family is shared by every token rotated from one sign-in. A rotated token is
// kept, Spent, until its expiry, so that presenting it again is recognised as
// reuse (a leaked token: OAuth 2.1 §4.3.1, RFC 9700 §4.14) and revokes the
// whole family, including the newest token, which the thief may hold.
type refreshToken struct {
	Family   string    `json:"family,omitempty"` // "" in files from before families: the token's own hash
	Spent    bool      `json:"spent,omitempty"`
	Hash     string    `json:"sha256"`
	ClientID string    `json:"client_id"`
	Subject  string    `json:"sub"`
	Scopes   []string  `json:"scopes"`
	AuthTime time.Time `json:"auth_time"`
	AMR      []string  `json:"amr"`
	Expiry   time.Time `json:"exp"`
}

// refreshRequest implements op.RefreshTokenRequest over a stored token.
type refreshRequest struct {
	t        refreshToken
	audience []string
	scopes   []string
}

func (r *refreshRequest) GetAMR() []string            { return r.t.AMR }
func (r *refreshRequest) GetAudience() []string       { return r.audience }
func (r *refreshRequest) GetAuthTime() time.Time      { return r.t.AuthTime }
func (r *refreshRequest) GetClientID() string         { return r.t.ClientID }
func (r *refreshRequest) GetScopes() []string         { return r.scopes }
func (r *refreshRequest) GetSubject() string          { return r.t.Subject }
func (r *refreshRequest) SetCurrentScopes(s []string) { r.scopes = s }

// The access token is a JWT built by pkg/op; its id is the jti. Nothing is
// stored: the resource server verifies it by signature alone.
func (s *storage) CreateAccessToken(_ context.Context, req op.TokenRequest) (string, time.Time, error) {
	if c, ok := req.(interface{ GetClientID() string }); ok {
		if err := s.markUsed(c.GetClientID()); err != nil {
			return "", time.Time{}, err
		}
	}
	return randomID(), s.now().Add(AccessTokenTTL), nil
}

func (s *storage) CreateAccessAndRefreshTokens(_ context.Context, req op.TokenRequest, current string) (string, string, time.Time, error) {
	var t refreshToken
	switch r := req.(type) {
	case *authRequest:
		t = refreshToken{ClientID: r.clientID, Subject: r.subject, Scopes: r.scopes, AuthTime: r.authTime, AMR: r.GetAMR()}
	case *refreshRequest:
		t = r.t
		t.Scopes = r.scopes
	case *op.DeviceAuthorizationState:
		t = refreshToken{ClientID: r.ClientID, Subject: r.Subject, Scopes: r.Scopes, AuthTime: r.AuthTime, AMR: r.AMR}
	default:
		return "", "", time.Time{}, fmt.Errorf("devidp: unexpected token request %T", req)
	}
	if err := s.markUsed(t.ClientID); err != nil {
		return "", "", time.Time{}, err
	}
	token := randomID()
	t.Hash = tokenHash(token)
	t.Expiry = s.now().Add(RefreshTokenTTL)
	t.Spent = false
	if current == "" {
		t.Family = randomID() // a sign-in starts a family; a refresh inherits it with r.t
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if current != "" {
		// Rotation: the presented token is spent; presenting it again revokes its family.
		old, ok := s.refresh[tokenHash(current)]
		if !ok || old.ClientID != t.ClientID {
			return "", "", time.Time{}, op.ErrInvalidRefreshToken
		}
		if old.Spent {
			// Two refreshes raced with one token: the second is a reuse.
			return "", "", time.Time{}, s.revokeFamilyLocked(old.Family)
		}
		old.Spent = true
	}
	s.refresh[t.Hash] = &t
	if err := s.saveRefreshLocked(); err != nil {
		return "", "", time.Time{}, err
	}
	return randomID(), token, s.now().Add(AccessTokenTTL), nil
}

func (s *storage) TokenRequestByRefreshToken(_ context.Context, token string) (op.RefreshTokenRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.refresh[tokenHash(token)]
	if !ok || !s.now().Before(t.Expiry) {
		return nil, op.ErrInvalidRefreshToken
	}
	if t.Spent {
		return nil, s.revokeFamilyLocked(t.Family)
	}
	return &refreshRequest{t: *t, audience: s.audience(t.ClientID), scopes: slices.Clone(t.Scopes)}, nil
}

// revokeFamilyLocked deletes every token of family, spent ones included (they
// have done their work once the family is gone), and answers the reuse that
// caused it: invalid_grant, or the error of saving the revocation.
func (s *storage) revokeFamilyLocked(family string) error {
	for k, t := range s.refresh {
		if t.Family == family {
			delete(s.refresh, k)
		}
	}
	if err := s.saveRefreshLocked(); err != nil {
		return err
	}
	return op.ErrInvalidRefreshToken
}

func (s *storage) TerminateSession(_ context.Context, userID, clientID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, t := range s.refresh {
		if t.Subject == userID && t.ClientID == clientID {
			delete(s.refresh, k)
		}
	}
	return s.saveRefreshLocked()
}

// RevokeToken revokes a refresh token given as the token or its id (hash);
// access tokens are self-contained JWTs
// that live out their (short) lifetime, which RFC 7009 §2 allows.
func (s *storage) RevokeToken(_ context.Context, token, _, clientID string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.refresh[tokenHash(token)]
	if !ok {
		// pkg/op's revocation endpoint passes the token id from
		// GetRefreshTokenInfo, which is the hash.
		t, ok = s.refresh[token]
	}
	if ok {
		if t.ClientID != clientID {
			return oidc.ErrInvalidClient().WithDescription("token was not issued to this client")
		}
		if t.Spent {
			// Revoking an old token of a family (a logout holding a stale copy) ends the family.
			_ = s.revokeFamilyLocked(t.Family)
			return nil
		}
		delete(s.refresh, t.Hash)
		if err := s.saveRefreshLocked(); err != nil {
			return oidc.ErrServerError().WithParent(err)
		}
	}
	return nil
}

func (s *storage) GetRefreshTokenInfo(_ context.Context, clientID, token string) (string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.refresh[tokenHash(token)]
	if !ok || t.ClientID != clientID || t.Spent {
		return "", "", op.ErrInvalidRefreshToken
	}
	return t.Subject, t.Hash, nil
}

func (s *storage) loadRefresh() error {
	var ts []*refreshToken
	if err := s.readJSON(refreshFile, &ts); err != nil {
		return err
	}
	now := s.now()
	for _, t := range ts {
		if t.Family == "" {
			t.Family = t.Hash // a token saved before families is a family of its own
		}
		if now.Before(t.Expiry) {
			s.refresh[t.Hash] = t
		}
	}
	return nil
}

func (s *storage) saveRefreshLocked() error {
	ts := make([]*refreshToken, 0, len(s.refresh))
	now := s.now()
	for _, t := range s.refresh {
		if now.Before(t.Expiry) {
			ts = append(ts, t)
		}
	}
	slices.SortFunc(ts, func(a, b *refreshToken) int { return strings.Compare(a.Hash, b.Hash) })
	return s.writeJSON(refreshFile, ts)
}
