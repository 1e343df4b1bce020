package payloadcrypt

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// key stores (dev, tests)
	_ "gocloud.dev/blob/memblob"  // mem:// key stores (ephemeral dev)
	"gocloud.dev/secrets"
	_ "gocloud.dev/secrets/localsecrets" // base64key:// key-encryption keys (dev)
)

// Opened is a Store with the bucket and keeper it opened, which Close closes.
type Opened struct {
	*Store
	bucket *blob.Bucket
	keeper *secrets.Keeper
}

// Open opens the key-encryption key keeperURL (a gocloud.dev/secrets URL: base64key://… in
// dev; awskms://, gcpkms://, azurekeyvault:// once the binary links their drivers) and the
// key store bucketURL (a gocloud.dev/blob URL, usually the artifact store's).
func Open(ctx context.Context, keeperURL, bucketURL string, o Options) (*Opened, error) {
	if keeperURL == "" || bucketURL == "" {
		return nil, errors.New("payloadcrypt: a key-encryption key URL and a key store URL are both needed")
	}
	if ku, err := url.Parse(keeperURL); err == nil && ku.Scheme == "base64key" && ku.Host == "" {
		// localsecrets makes an empty base64key:// a random key per process: no two processes
		// (nor one across a restart) could open each other's data keys.
		return nil, errors.New("payloadcrypt: base64key:// holds no key (it would be a new random one in every process): " +
			"give a whole key, e.g. from `jobgate keygen payload-kek`")
	}
	k, err := secrets.OpenKeeper(ctx, keeperURL)
	if err != nil {
		// The URL of a local key holds the key itself: never repeat it in an error.
		return nil, fmt.Errorf("payloadcrypt: open the key-encryption key (%s://…): %w", schemeOf(keeperURL), err)
	}
	u, err := url.Parse(bucketURL)
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("payloadcrypt: key store URL: %w", err)
	}
	if u.Scheme == "file" && !u.Query().Has("create_dir") {
		q := u.Query()
		q.Set("create_dir", "true") // a fresh data directory should just work
		u.RawQuery = q.Encode()
	}
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("payloadcrypt: open the key store: %w", err)
	}
	return &Opened{Store: NewStore(b, k, o), bucket: b, keeper: k}, nil
}

// Close closes the bucket and the keeper.
func (o *Opened) Close() error {
	return errors.Join(o.bucket.Close(), o.keeper.Close())
}

func schemeOf(u string) string {
	if p, err := url.Parse(u); err == nil && p.Scheme != "" {
		return p.Scheme
	}
	return "?"
}

// NewLocalKEK is a fresh local key-encryption key URL (base64key://…), for dev stacks and
// tests. It holds the key itself: keep it like any other secret.
func NewLocalKEK() string {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return "base64key://" + base64.URLEncoding.EncodeToString(k)
}
