package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/frontend/handle"
)

const payloadKeysUsage = `Usage: jobgate payload-keys list|rotate --tenant T[,T2…] [flags]

Operator tool for the tenants' payload keys (the data keys that encrypt what jobgate writes to
Temporal), with the key-encryption key and store serve and worker use:
  list     each tenant's key IDs, oldest first; the last one seals new payloads
  rotate   add a new key per tenant: serve and worker seal with it within a minute (their
           cache of the newest key), and every older key keeps opening what it sealed
`

// runPayloadKeys is `jobgate payload-keys`. bindEnv gives every flag its JOBGATE_ variable, as
// serve's and worker's have (main.go passes app.BindEnv: only main.go links cmd/app).
func runPayloadKeys(args []string, stdout, stderr io.Writer, bindEnv func(*flag.FlagSet) error) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "rotate") {
		fmt.Fprint(stderr, payloadKeysUsage)
		return flag.ErrHelp
	}
	verb := args[0]
	fs, store := newKeyStoreFlags("payload-keys "+verb, payloadKeysUsage, "", stderr)
	var tenants string
	fs.StringVar(&tenants, "tenant", "", "required: the tenants, comma-separated")
	if err := bindEnv(fs); err != nil {
		return err
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if tenants == "" {
		fs.Usage()
		return errors.New("--tenant is required")
	}
	return store.with(2*time.Minute, func(ctx context.Context, keys *payloadcrypt.Opened) error {
		return listOrRotate(ctx, keys, verb, tenants, stdout)
	})
}

// listOrRotate is payload-keys' work: each tenant's key IDs (list), or a new key for each
// (rotate), one line a key.
func listOrRotate(ctx context.Context, keys *payloadcrypt.Opened, verb, tenants string, stdout io.Writer) error {
	for _, t := range strings.Split(tenants, ",") {
		t = strings.TrimSpace(t)
		if verb == "rotate" {
			id, err := keys.Add(ctx, t)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s\t%s\tadded: seals new payloads from now on (serve and worker within a minute)\n", t, id)
			continue
		}
		ids, err := keys.List(ctx, t)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			fmt.Fprintf(stdout, "%s\t-\tno key yet: one is made on the tenant's first job\n", t)
		}
		for i, id := range ids {
			note := "opens older payloads"
			if i == len(ids)-1 {
				note = "newest: seals new payloads"
			}
			fmt.Fprintf(stdout, "%s\t%s\t%s\n", t, id, note)
		}
	}
	return nil
}

// ---------------------------------------------------------------- jobgate keygen

const keygenUsage = `Usage: jobgate keygen payload-kek|signing-keys|resume-keys|handle-keys [-o file]

Makes one fresh key in the syntax its serve/worker flag reads, on stdout (or, with -o, in a new
file only you can read; an existing file is never overwritten):
  payload-kek    base64key://… for --payload-kek-file: a local key-encryption key, for dev and
                 tests. In production use a KMS key URL instead (awskms://…, gcpkms://…,
                 azurekeyvault://…): a base64key URL is the key itself
  signing-keys   s<date>:<hex seed> for --signing-keys-file (Ed25519; serve and the workers)
  resume-keys    r<date>:<hex key> for --resume-keys-file (HMAC; serve and the workers)
  handle-keys    k<date>:<hex key> for --handle-keys-file (HMAC; serve only)
To rotate a keyring, put the new entry first, comma-separated, and keep the old ones after it.
`

// keygens are the keys keygen makes, by name.
var keygens = map[string]func(kid string) string{
	"payload-kek":  func(string) string { return payloadcrypt.NewLocalKEK() },
	"signing-keys": func(kid string) string { return "s" + kid + ":" + handle.GenerateSigningSeedHex() },
	"resume-keys":  func(kid string) string { return "r" + kid + ":" + handle.GenerateKeyHex() },
	"handle-keys":  func(kid string) string { return "k" + kid + ":" + handle.GenerateKeyHex() },
}

// runKeygen is `jobgate keygen`: one new key of the kind args[0] names.
func runKeygen(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || keygens[args[0]] == nil {
		fmt.Fprint(stderr, keygenUsage)
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			return flag.ErrHelp
		}
		return fmt.Errorf("keygen: unknown key %q (want payload-kek, signing-keys, resume-keys or handle-keys)", args[0])
	}
	gen := keygens[args[0]]
	fs := commandFlags("keygen "+args[0], keygenUsage, stderr)
	out := fs.String("o", "", "write the key to this new file (mode 0600) instead of stdout")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("keygen: unexpected arguments %q", fs.Args())
	}
	key := gen(time.Now().UTC().Format("20060102")) + "\n"
	if *out == "" {
		_, err := io.WriteString(stdout, key)
		return err
	}
	// O_EXCL: overwriting a key file would lose the key (for a payload KEK: every payload).
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("keygen -o: %w", err)
	}
	if _, err := io.WriteString(f, key); err != nil {
		_ = f.Close()
		return fmt.Errorf("keygen -o: %w", err)
	}
	return f.Close()
}

// keyStoreFlags are the flags of the operator commands that open the tenants' payload keys
// (payload-keys, tenant forget): the key-encryption key and key store serve and worker have,
// and their artifact store, whose keys/ prefix is the default key store.
type keyStoreFlags struct {
	keys      payloadcrypt.Config
	artifacts string
}

// newKeyStoreFlags is an operator command's flag set (-h: usage, then the flags) with the key
// store's flags; artifactsUse, when set, says what else the command does with --artifacts.
func newKeyStoreFlags(name, usage, artifactsUse string, stderr io.Writer) (*flag.FlagSet, *keyStoreFlags) {
	fs := commandFlags(name, usage, stderr)
	var k keyStoreFlags
	k.keys.Flags(fs)
	fs.StringVar(&k.artifacts, "artifacts", "", "the artifact store URL serve and worker have ("+artifactsUse+"its keys/ prefix is the default key store)")
	return fs, &k
}

// with opens the payload keys as serve and worker would and runs f with them, all within
// timeout; the keys are closed when f returns.
func (k *keyStoreFlags) with(timeout time.Duration, f func(context.Context, *payloadcrypt.Opened) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	keys, err := k.keys.Open(ctx, k.artifacts, payloadcrypt.Options{})
	if err != nil {
		return err
	}
	defer keys.Close()
	return f(ctx, keys)
}
