package authz

import (
	"context"
	"sync"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

func TestLateVerifier(t *testing.T) {
	tok := sign(t, jwt.SigningMethodHS256, testSecret, baseClaims())
	var l LateVerifier
	refused := func(when string) {
		t.Helper()
		if c, err := l.Verify(context.Background(), tok); err == nil || err.Error() != "invalid token: "+reasonNilVerifier || c.Principal.Subject != "" {
			t.Fatalf("%s: %+v, %v; want %q", when, c, err, reasonNilVerifier)
		}
	}
	refused("before Set")
	l.Set(newTestVerifier(t))
	if c, err := l.Verify(context.Background(), tok); err != nil || c.Principal.Subject != "alice" || c.Issuer != testIss {
		t.Fatalf("after Set: %+v, %v", c, err)
	}
	l.Set(nil)
	refused("after Set(nil)")
	var nilL *LateVerifier
	if _, err := nilL.Verify(context.Background(), tok); err == nil {
		t.Fatal("nil LateVerifier accepted a token")
	}

	// Set while tokens are verified: each answer is the old or the new
	// verifier's, never a torn one (run with -race).
	other := hsVerifier(t, multiIssB, multiSecretB)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				c, err := l.Verify(context.Background(), tok)
				if err == nil && c.Issuer != testIss {
					t.Errorf("accepted with issuer %q", c.Issuer)
				}
			}
		}()
	}
	for j := 0; j < 200; j++ {
		if j%2 == 0 {
			l.Set(newTestVerifier(t))
		} else {
			l.Set(other)
		}
	}
	wg.Wait()
}
