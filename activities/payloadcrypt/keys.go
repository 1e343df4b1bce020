package payloadcrypt

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"gocloud.dev/secrets"
	"golang.org/x/sync/singleflight"

	"github.com/jobgate/jobgate/authz"
)

// KeyPrefix is where the wrapped data keys live in their bucket: keys/<tenant>/<key ID>.json.
// Nothing else in the artifact store uses it (exports live under their job's prefix).
const KeyPrefix = "keys/"

// ErrUnknownKey is a key ID the store does not hold for the tenant: a payload sealed by
// another deployment's store, or by a key that was deleted (a forgotten tenant).
var ErrUnknownKey = errors.New("payloadcrypt: unknown data key")

// Defaults of Options.
const (
	CacheSizeDefault  = 4096
	CurrentTTLDefault = time.Minute
	// opTimeout bounds one key fetch or creation: codecs run without a context, and a
	// workflow task must not hang on a stalled bucket or KMS.
	opTimeout = 30 * time.Second
)

// Options tune a Store.
type Options struct {
	// CacheSize bounds the unwrapped keys held in memory. Defaults to CacheSizeDefault.
	CacheSize int
	// CurrentTTL is how long a tenant's newest key is used before the store looks again, so
	// a rotation (another process's) reaches this one within it. Defaults to a minute.
	CurrentTTL time.Duration
	// KeyRecheck is how long an unwrapped key is used before the store checks that its object
	// still exists, so a forgotten tenant (Forget, another process's) stops opening here within
	// it. Defaults to CurrentTTL.
	KeyRecheck time.Duration
	// Now is the clock of new key IDs and the TTLs. Defaults to time.Now.
	Now func() time.Time
}

// Store holds the tenants' data keys: wrapped by keeper in bucket, unwrapped in a bounded cache.
type Store struct {
	bucket *blob.Bucket
	keeper *secrets.Keeper
	opts   Options

	mu      sync.Mutex
	keys    *lru[keyEntry]     // "<tenant>/<key ID>" → the key
	current *lru[currentEntry] // tenant → its newest key, as of fetched
	flight  singleflight.Group
}

// keyEntry is an unwrapped key and when its object was last seen in the bucket.
type keyEntry struct {
	aead    cipher.AEAD
	checked time.Time
}

type currentEntry struct {
	keyID   string
	aead    cipher.AEAD
	fetched time.Time
}

// NewStore keeps data keys in bucket under KeyPrefix, wrapped by keeper. The caller keeps
// ownership of both (Close closes neither).
func NewStore(bucket *blob.Bucket, keeper *secrets.Keeper, o Options) *Store {
	if o.CacheSize <= 0 {
		o.CacheSize = CacheSizeDefault
	}
	if o.CurrentTTL <= 0 {
		o.CurrentTTL = CurrentTTLDefault
	}
	if o.KeyRecheck <= 0 {
		o.KeyRecheck = o.CurrentTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{bucket: bucket, keeper: keeper, opts: o, keys: newLRU[keyEntry](o.CacheSize),
		current: newLRU[currentEntry](o.CacheSize)}
}

// wrappedKey is one stored object: what a person listing the bucket sees, and no secret.
type wrappedKey struct {
	Version   int       `json:"version"`
	Tenant    string    `json:"tenant"`
	KeyID     string    `json:"key_id"`
	CreatedAt time.Time `json:"created_at"`
	// Wrapped is the data key encrypted by the key-encryption key (the keeper).
	Wrapped []byte `json:"wrapped"`
}

func objectKey(tenant, keyID string) string { return KeyPrefix + tenant + "/" + keyID + ".json" }

// Current is tenant's newest data key, made (and stored) on the tenant's first use.
func (s *Store) Current(tenant string) (string, cipher.AEAD, error) {
	s.mu.Lock()
	e, ok := s.current.get(tenant)
	s.mu.Unlock()
	if ok && s.opts.Now().Sub(e.fetched) < s.opts.CurrentTTL {
		return e.keyID, e.aead, nil
	}
	v, err, _ := s.flight.Do("current\x00"+tenant, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		ids, err := s.List(ctx, tenant)
		if err != nil {
			return nil, err
		}
		var id string
		if len(ids) == 0 {
			if err := s.refuseForgotten(ctx, tenant); err != nil {
				return nil, err
			}
			// First use. Two processes may both get here: each stores its own key before
			// using it, so both keys open what they sealed, and the greater one wins later.
			if id, err = s.Add(ctx, tenant); err != nil {
				return nil, err
			}
		} else {
			id = ids[len(ids)-1]
		}
		aead, err := s.key(ctx, tenant, id)
		if err != nil {
			return nil, err
		}
		e := currentEntry{keyID: id, aead: aead, fetched: s.opts.Now()}
		s.mu.Lock()
		s.current.put(tenant, e)
		s.mu.Unlock()
		return e, nil
	})
	if err != nil {
		return "", nil, err
	}
	e = v.(currentEntry)
	return e.keyID, e.aead, nil
}

// Key is the data key keyID of tenant, for decoding.
func (s *Store) Key(tenant, keyID string) (cipher.AEAD, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return s.key(ctx, tenant, keyID)
}

func (s *Store) key(ctx context.Context, tenant, keyID string) (cipher.AEAD, error) {
	name := tenant + "/" + keyID
	s.mu.Lock()
	e, ok := s.keys.get(name)
	s.mu.Unlock()
	if ok && s.opts.Now().Sub(e.checked) < s.opts.KeyRecheck {
		return e.aead, nil
	}
	if ok {
		return s.recheck(ctx, name, tenant, keyID, e)
	}
	v, err, _ := s.flight.Do("key\x00"+name, func() (any, error) {
		b, err := s.bucket.ReadAll(ctx, objectKey(tenant, keyID))
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, fmt.Errorf("%w: tenant %s, key %s", ErrUnknownKey, tenant, keyID)
		}
		if err != nil {
			return nil, fmt.Errorf("payloadcrypt: read key %s of tenant %s: %w", keyID, tenant, err)
		}
		var w wrappedKey
		if err := json.Unmarshal(b, &w); err != nil || w.Tenant != tenant || w.KeyID != keyID {
			// A key object copied under another tenant's name opens nothing of theirs.
			return nil, fmt.Errorf("payloadcrypt: key %s of tenant %s: stored object does not name it", keyID, tenant)
		}
		raw, err := s.keeper.Decrypt(ctx, w.Wrapped)
		if err != nil {
			return nil, fmt.Errorf("payloadcrypt: unwrap key %s of tenant %s (is this the key-encryption key that wrapped it?): %w", keyID, tenant, err)
		}
		a, err := newAEAD(raw)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.keys.put(name, keyEntry{aead: a, checked: s.opts.Now()})
		s.mu.Unlock()
		return a, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(cipher.AEAD), nil
}

func newAEAD(raw []byte) (cipher.AEAD, error) {
	if len(raw) != 32 {
		return nil, fmt.Errorf("payloadcrypt: data key of %d bytes, want 32", len(raw))
	}
	b, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// Add makes a new data key for tenant, stores it wrapped and returns its ID: from now on (for
// other processes, within their CurrentTTL) new payloads of the tenant use it. Older keys stay
// and keep opening what they sealed.
func (s *Store) Add(ctx context.Context, tenant string) (string, error) {
	if err := authz.ValidTenant(tenant); err != nil {
		return "", fmt.Errorf("payloadcrypt: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	wrapped, err := s.keeper.Encrypt(ctx, raw)
	if err != nil {
		return "", fmt.Errorf("payloadcrypt: wrap a key for tenant %s: %w", tenant, err)
	}
	now := s.opts.Now().UTC()
	id := newKeyID(now)
	b, err := json.Marshal(wrappedKey{Version: 1, Tenant: tenant, KeyID: id, CreatedAt: now, Wrapped: wrapped})
	if err != nil {
		return "", err
	}
	// IfNotExist: a key is never overwritten, whatever races (an overwrite would orphan
	// every payload its first version sealed).
	if err := s.bucket.WriteAll(ctx, objectKey(tenant, id), b, &blob.WriterOptions{ContentType: "application/json", IfNotExist: true}); err != nil {
		return "", fmt.Errorf("payloadcrypt: store key %s of tenant %s: %w", id, tenant, err)
	}
	a, err := newAEAD(raw)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.keys.put(tenant+"/"+id, keyEntry{aead: a, checked: s.opts.Now()})
	s.current.put(tenant, currentEntry{keyID: id, aead: a, fetched: s.opts.Now()})
	s.mu.Unlock()
	return id, nil
}

func newKeyID(t time.Time) string {
	r := make([]byte, 4)
	_, _ = rand.Read(r)
	return t.UTC().Format(keyIDLayout) + "-" + hex.EncodeToString(r)
}

// List is tenant's key IDs, oldest first (the last one is the newest).
func (s *Store) List(ctx context.Context, tenant string) ([]string, error) {
	if err := authz.ValidTenant(tenant); err != nil {
		return nil, fmt.Errorf("payloadcrypt: %w", err)
	}
	prefix := KeyPrefix + tenant + "/"
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	var ids []string
	for {
		o, err := it.Next(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("payloadcrypt: list keys of tenant %s: %w", tenant, err)
		}
		id, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, prefix), ".json")
		if ok && ValidKeyID(id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}
