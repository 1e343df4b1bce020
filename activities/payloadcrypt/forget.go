package payloadcrypt

// Crypto-shredding: forgetting a tenant deletes its wrapped data keys, so every payload they
// sealed (in Temporal's database, its backups, anywhere) is ciphertext for good.

import (
	"context"
	"crypto/cipher"
	"errors"
	"fmt"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/jobgate/jobgate/authz"
)

// ErrForgotten is a payload to seal for a forgotten tenant: no new key is made for it (that
// would make the rest of a running job readable again). `jobgate payload-keys rotate` gives
// the tenant a key again, on purpose.
var ErrForgotten = errors.New("payloadcrypt: tenant forgotten (its payload keys were deleted); payload-keys rotate gives it a new key")

// forgottenKey marks a forgotten tenant, beside its (deleted) keys; List ignores it (not a key ID).
func forgottenKey(tenant string) string { return KeyPrefix + tenant + "/forgotten" }

// Forget deletes every data key of tenant and returns how many it deleted: from then on this
// store opens none of the tenant's payloads, and other processes' stores stop within their
// KeyRecheck (a minute by default). It first leaves a marker, so no process makes the tenant a
// new key afterwards (Current: ErrForgotten). Forgetting a tenant with no keys succeeds.
func (s *Store) Forget(ctx context.Context, tenant string) (int, error) {
	if err := authz.ValidTenant(tenant); err != nil {
		return 0, fmt.Errorf("payloadcrypt: %w", err)
	}
	if err := s.bucket.WriteAll(ctx, forgottenKey(tenant), []byte("forgotten\n"), &blob.WriterOptions{ContentType: "text/plain"}); err != nil {
		return 0, fmt.Errorf("payloadcrypt: mark tenant %s forgotten: %w", tenant, err)
	}
	ids, err := s.List(ctx, tenant)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if err := s.bucket.Delete(ctx, objectKey(tenant, id)); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return n, fmt.Errorf("payloadcrypt: delete key %s of tenant %s: %w", id, tenant, err)
		}
		n++
	}
	s.mu.Lock()
	s.keys.removeIf(func(k string) bool { return strings.HasPrefix(k, tenant+"/") })
	s.current.remove(tenant)
	s.mu.Unlock()
	return n, nil
}

// refuseForgotten is ErrForgotten for a tenant Forget marked.
func (s *Store) refuseForgotten(ctx context.Context, tenant string) error {
	ok, err := s.bucket.Exists(ctx, forgottenKey(tenant))
	if err != nil {
		return fmt.Errorf("payloadcrypt: look for tenant %s's keys: %w", tenant, err)
	}
	if ok {
		return fmt.Errorf("%w: tenant %s", ErrForgotten, tenant)
	}
	return nil
}

// recheck is a cached key e past KeyRecheck: still stored, it is used for another period; gone
// (a forgotten tenant), it is dropped and ErrUnknownKey. A bucket that does not answer keeps
// the key in use: an outage of the store must not stop every job.
func (s *Store) recheck(ctx context.Context, name, tenant, keyID string, e keyEntry) (cipher.AEAD, error) {
	ok, err := s.bucket.Exists(ctx, objectKey(tenant, keyID))
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil:
		return e.aead, nil
	case !ok:
		s.keys.remove(name)
		if c, has := s.current.get(tenant); has && c.keyID == keyID {
			s.current.remove(tenant)
		}
		return nil, fmt.Errorf("%w: tenant %s, key %s", ErrUnknownKey, tenant, keyID)
	}
	e.checked = s.opts.Now()
	s.keys.put(name, e)
	return e.aead, nil
}
