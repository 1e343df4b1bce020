package frontend

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
)

func TestTokenCache(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newTokenCache(func() time.Time { return now })
	ana := authz.Claims{Principal: authz.Principal{Tenant: "acme", Subject: "ana"}, Expiry: now.Add(time.Hour)}
	c.put("tok-ana", ana)
	if got, ok := c.get("tok-ana"); !ok || got.Principal.Subject != "ana" {
		t.Fatalf("cached token: %v %v", got, ok)
	}
	if _, ok := c.get("tok-bo"); ok {
		t.Fatal("another token was served a cached principal")
	}
	now = now.Add(tokenCacheTTL)
	if _, ok := c.get("tok-ana"); ok {
		t.Fatal("entry outlived the cache TTL")
	}
	// A token is never served past its own exp, even within the TTL.
	short := authz.Claims{Principal: authz.Principal{Tenant: "acme", Subject: "cy"}, Expiry: now.Add(time.Second)}
	c.put("tok-cy", short)
	now = now.Add(time.Second)
	if _, ok := c.get("tok-cy"); ok {
		t.Fatal("entry outlived the token's exp")
	}
	c.put("tok-old", authz.Claims{Expiry: now.Add(-time.Second)})
	if _, ok := c.get("tok-old"); ok {
		t.Fatal("an expired token was cached")
	}
	for i := range tokenCacheMax + 10 {
		c.put(fmt.Sprint("t", i), ana)
	}
	if n := len(c.m); n > tokenCacheMax {
		t.Fatalf("cache holds %d entries, max %d", n, tokenCacheMax)
	}
}
