package frontend

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/jobgate/jobgate/authz"
)

// Bounds of the verified-token cache.
const (
	// tokenCacheTTL is the longest a verified token is served from the cache without being
	// verified again. A token is never served past its own exp. A token the issuer revokes, or
	// whose signing key leaves the JWKS, keeps working for at most this long on a replica that
	// verified it (jobgate has no revocation list: without the cache it works until its exp).
	tokenCacheTTL = 30 * time.Second
	// tokenCacheMax bounds the entries; when full, expired entries go, then everything does.
	tokenCacheMax = 10_000
)

// tokenCache remembers successfully verified bearer tokens by sha256 of the whole token (never
// the token itself), so a repeated token skips JWT parsing and signature checks. An entry is the
// Claims the verifier proved for exactly that token: a different token, even of the same
// principal, has a different key, so one token's principal is never served for another.
// Failures are never cached.
type tokenCache struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[[sha256.Size]byte]tokenEntry
}

type tokenEntry struct {
	claims authz.Claims
	info   *auth.TokenInfo // tokenInfo(claims), built once; shared by every request with the token, never modified
	until  time.Time
}

func newTokenCache(now func() time.Time) *tokenCache {
	return &tokenCache{now: now, m: make(map[[sha256.Size]byte]tokenEntry)}
}

func (c *tokenCache) get(token string) (authz.Claims, bool) {
	e, ok := c.entry(token)
	return e.claims, ok
}

// info is the token info of a cached token (see tokenEntry.info).
func (c *tokenCache) info(token string) (*auth.TokenInfo, bool) {
	e, ok := c.entry(token)
	return e.info, ok
}

func (c *tokenCache) entry(token string) (tokenEntry, bool) {
	k := sha256.Sum256([]byte(token))
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return tokenEntry{}, false
	}
	if !now.Before(e.until) {
		delete(c.m, k)
		return tokenEntry{}, false
	}
	return e, true
}

func (c *tokenCache) put(token string, cl authz.Claims) {
	now := c.now()
	until := now.Add(tokenCacheTTL)
	if cl.Expiry.IsZero() || cl.Expiry.Before(until) {
		until = cl.Expiry
	}
	if !now.Before(until) {
		return
	}
	k := sha256.Sum256([]byte(token))
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= tokenCacheMax {
		for key, e := range c.m {
			if !now.Before(e.until) {
				delete(c.m, key)
			}
		}
		if len(c.m) >= tokenCacheMax {
			clear(c.m)
		}
	}
	c.m[k] = tokenEntry{claims: cl, info: tokenInfo(cl), until: until}
}

// tokenInfo is what the go-sdk's bearer middleware and the tool handlers read of a verified
// token. Nobody modifies a TokenInfo after verification, so a cached one is shared.
func tokenInfo(c authz.Claims) *auth.TokenInfo {
	return &auth.TokenInfo{
		Scopes:     authz.ScopeStrings(c.Principal.Scopes),
		Expiration: c.Expiry,
		UserID:     c.Principal.Tenant + "/" + c.Principal.Subject,
		Extra:      map[string]any{principalKey: c.Principal, identityKey: identityOf(c)},
	}
}
