package app

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
)

func TestBindEnv(t *testing.T) {
	newFS := func() (*flag.FlagSet, *ServeConfig) {
		var c ServeConfig
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.Flags(fs)
		return fs, &c
	}
	t.Run("EnvSetsAndFlagWins", func(t *testing.T) {
		t.Setenv("JOBGATE_ISSUER", "https://from-env")
		t.Setenv("JOBGATE_HANDLE_TTL", "2h")
		fs, c := newFS()
		if err := BindEnv(fs); err != nil {
			t.Fatal(err)
		}
		if err := fs.Parse([]string{"--issuer", "https://from-flag"}); err != nil {
			t.Fatal(err)
		}
		if c.Issuer != "https://from-flag" || c.HandleTTL != 2*time.Hour {
			t.Fatalf("issuer %q ttl %s", c.Issuer, c.HandleTTL)
		}
		if u := fs.Lookup("temporal-address").Usage; !strings.Contains(u, "(env JOBGATE_TEMPORAL_ADDRESS)") {
			t.Fatalf("usage %q", u)
		}
	})
	t.Run("BadValueIsAnErrorNamingTheVariable", func(t *testing.T) {
		t.Setenv("JOBGATE_HANDLE_TTL", "a week")
		fs, _ := newFS()
		err := BindEnv(fs)
		if err == nil || !strings.Contains(err.Error(), "JOBGATE_HANDLE_TTL") {
			t.Fatalf("err %v", err)
		}
	})
}

// TestPayloadKeysOpen: serve's and worker's payload key flags open a linked keeper (awskms://
// here: opening makes no AWS call) over the artifact store; an unlinked scheme, a missing
// store or a DEV-ONLY key file outside a dev deployment fail start-up naming the flag.
func TestPayloadKeysOpen(t *testing.T) {
	store := "file://" + t.TempDir()
	tc := TemporalConfig{Payloads: payloadcrypt.Config{KEK: "awskms://alias/jobgate?region=eu-west-1"}}
	closeKeys, err := tc.OpenPayloadKeys(context.Background(), store, false)
	if err != nil {
		t.Fatalf("awskms keeper: %v", err)
	}
	if tc.FailureConverter() == nil || tc.DataConverter() == converter.GetDefaultDataConverter() {
		t.Fatal("payload keys opened but the converters are the defaults")
	}
	if err := closeKeys(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		cfg   payloadcrypt.Config
		store string
		want  string
	}{
		"unknown scheme": {payloadcrypt.Config{KEK: "nosuchkms://k"}, store, "key-encryption key"},
		"no store":       {payloadcrypt.Config{KEK: payloadcrypt.NewLocalKEK()}, "", "--payload-key-store"},
		"dev-only":       {payloadcrypt.Config{KEKFile: writeTemp(t, "DEV-ONLY-payload-kek", payloadcrypt.NewLocalKEK())}, store, DevOnlyMarker},
	} {
		tc := TemporalConfig{Payloads: c.cfg}
		if _, err := tc.OpenPayloadKeys(context.Background(), c.store, false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, c.want)
		}
	}
	// Without a key-encryption key: refused, naming both flags; only InsecureClearPayloads (set
	// in code, no flag) gives clear payloads and the SDK's converters.
	var none TemporalConfig
	if _, err := none.OpenPayloadKeys(context.Background(), store, true); !errors.Is(err, ErrNoPayloadKEK) ||
		!strings.HasPrefix(err.Error(), "--payload-kek or --payload-kek-file is required") || none.FailureConverter() != nil {
		t.Fatalf("no key: %v, want ErrNoPayloadKEK", err)
	}
	clear := TemporalConfig{InsecureClearPayloads: true}
	if _, err := clear.OpenPayloadKeys(context.Background(), store, false); err != nil || clear.FailureConverter() != nil {
		t.Fatalf("no key, InsecureClearPayloads: %v", err)
	}
}

func writeTemp(t *testing.T, name, content string) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTemporalCompression: gzip is the SDK's default for clear payloads, none for sealed ones
// (ciphertext does not shrink), either can be named, and anything else names the flag.
func TestTemporalCompression(t *testing.T) {
	log := zap.NewNop()
	sealed := TemporalConfig{}
	sealed.payload = &payloadState{}
	for _, tc := range []struct {
		name string
		c    TemporalConfig
		want string // "" the SDK default (gzip), "none"
	}{
		{"clear default", TemporalConfig{}, ""},
		{"sealed default", sealed, "none"},
		{"clear none", TemporalConfig{Compression: "none"}, "none"},
		{"sealed gzip", func() TemporalConfig { c := sealed; c.Compression = "gzip"; return c }(), ""},
	} {
		opts, err := tc.c.Options(log)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, none := opts.ConnectionOptions.GrpcCompression.(*client.GrpcCompressionNone)
		if none != (tc.want == "none") {
			t.Errorf("%s: compression %T, want %q", tc.name, opts.ConnectionOptions.GrpcCompression, tc.want)
		}
	}
	if _, err := (TemporalConfig{Compression: "zstd"}).Options(log); err == nil || !strings.Contains(err.Error(), "--temporal-compression") {
		t.Errorf("zstd: %v, want an error naming --temporal-compression", err)
	}
}
