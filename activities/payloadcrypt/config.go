package payloadcrypt

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// Config says where a process finds the payload keys: serve, worker, replay and the operator's
// `jobgate payload-keys` share these flags (each with its JOBGATE_… variable).
type Config struct {
	// KEK is the key-encryption key's gocloud.dev/secrets URL. A base64key:// URL holds the
	// key itself, so prefer KEKFile.
	KEK string
	// KEKFile holds KEK (the file's trimmed text); it wins over KEK.
	KEKFile string
	// StoreURL is the gocloud.dev/blob bucket of the wrapped data keys. Defaults to the
	// artifact store (--artifacts), under keys/.
	StoreURL string
}

// Flags registers --payload-kek, --payload-kek-file and --payload-key-store.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.KEK, "payload-kek", "", "key-encryption key URL wrapping the tenants' payload keys: base64key://… (dev), awskms://…, gcpkms://…, azurekeyvault://… (prefer --payload-kek-file: a base64key URL is the key)")
	fs.StringVar(&c.KEKFile, "payload-kek-file", "", "file holding --payload-kek")
	fs.StringVar(&c.StoreURL, "payload-key-store", "", "blob URL keeping the wrapped payload keys (default: the --artifacts store, under keys/)")
}

// Enabled reports whether a key-encryption key is configured.
func (c Config) Enabled() bool { return c.KEK != "" || c.KEKFile != "" }

// Resolve is the key-encryption key URL (from the file when given) and the store URL
// (artifactsURL when none is set).
func (c Config) Resolve(artifactsURL string) (kek, store string, err error) {
	kek = c.KEK
	if c.KEKFile != "" {
		b, err := os.ReadFile(c.KEKFile)
		if err != nil {
			return "", "", fmt.Errorf("--payload-kek-file: %w", err)
		}
		kek = strings.TrimSpace(string(b))
	}
	if kek == "" {
		return "", "", errors.New("--payload-kek or --payload-kek-file: no key-encryption key")
	}
	store = c.StoreURL
	if store == "" {
		store = artifactsURL
	}
	if store == "" {
		return "", "", errors.New("--payload-key-store: payload keys need a store (or --artifacts, whose keys/ prefix they then use)")
	}
	return kek, store, nil
}

// Open opens the store c names (see Resolve).
func (c Config) Open(ctx context.Context, artifactsURL string, o Options) (*Opened, error) {
	kek, store, err := c.Resolve(artifactsURL)
	if err != nil {
		return nil, err
	}
	return Open(ctx, kek, store, o)
}
