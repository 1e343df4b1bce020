package authz

import (
	"context"
	"sync/atomic"
)

// LateVerifier is a [Verifier] whose real verifier is set after the server
// starts. `dev` needs it: the dev identity provider's JWKS is served by the
// same listener as the MCP endpoint, and [NewJWKSVerifier] fetches the key
// set at construction, so the verifier can only be built once the server
// answers. Until [LateVerifier.Set] every token is refused ("verifier not
// configured", a 401), never accepted. The zero value is ready; safe for
// concurrent use.
type LateVerifier struct {
	v atomic.Pointer[lateBox]
}

// lateBox lets atomic.Pointer hold an interface value.
type lateBox struct{ v Verifier }

var _ Verifier = (*LateVerifier)(nil)

// Set makes v the verifier from now on; nil refuses every token again.
func (l *LateVerifier) Set(v Verifier) {
	if v == nil {
		l.v.Store(nil)
		return
	}
	l.v.Store(&lateBox{v: v})
}

// Verify hands token to the verifier last Set, or refuses it.
func (l *LateVerifier) Verify(ctx context.Context, token string) (Claims, error) {
	if l == nil {
		return Claims{}, invalid(nil, reasonNilVerifier)
	}
	b := l.v.Load()
	if b == nil {
		return Claims{}, invalid(nil, reasonNilVerifier)
	}
	return b.v.Verify(ctx, token)
}
