package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/frontend/handle"
)

// TestPayloadKeysRotate: an operator rotates a tenant's key with the flags serve and worker
// have; list then shows the older key and the new one, newest last.
func TestPayloadKeysRotate(t *testing.T) {
	kekFile := t.TempDir() + "/kek"
	if err := os.WriteFile(kekFile, []byte(payloadcrypt.NewLocalKEK()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--tenant", "acme,globex", "--payload-kek-file", kekFile, "--artifacts", "file://" + t.TempDir()}
	runOut := func(verb string) string {
		t.Helper()
		var out, errb strings.Builder
		if err := run(append([]string{"payload-keys", verb}, flags...), &out, &errb); err != nil {
			t.Fatalf("payload-keys %s: %v\n%s", verb, err, errb.String())
		}
		return out.String()
	}
	if got := runOut("list"); strings.Count(got, "no key yet") != 2 {
		t.Fatalf("list before any key:\n%s", got)
	}
	first := runOut("rotate")
	second := runOut("rotate")
	list := runOut("list")
	if strings.Count(list, "acme\t") != 2 || strings.Count(list, "globex\t") != 2 || strings.Count(list, "newest") != 2 {
		t.Fatalf("list after two rotations:\n%s", list)
	}
	newest := strings.Fields(strings.Split(second, "\n")[0])[1]
	if !strings.Contains(list, "acme\t"+newest+"\tnewest") || strings.Contains(first, newest) {
		t.Fatalf("newest acme key %s; list:\n%s", newest, list)
	}
	var errb strings.Builder
	if err := run([]string{"payload-keys", "rotate", "--tenant", "acme"}, &strings.Builder{}, &errb); err == nil {
		t.Fatal("rotate without a key-encryption key succeeded")
	}
}

// TestKeygen: each key keygen makes is read by the parser its flag uses (a payload KEK opens a
// key store, and its key set seals); two runs differ; -o writes a new 0600 file and never
// overwrites one; an unknown kind is a usage error naming the kinds.
func TestKeygen(t *testing.T) {
	gen := func(args ...string) string {
		t.Helper()
		var out, errb strings.Builder
		if err := run(append([]string{"keygen"}, args...), &out, &errb); err != nil {
			t.Fatalf("keygen %v: %v\n%s", args, err, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	for kind, check := range map[string]func(string) error{
		"payload-kek": func(s string) error {
			o, err := payloadcrypt.Open(context.Background(), s, "file://"+t.TempDir(), payloadcrypt.Options{})
			if err == nil {
				_, err = o.Add(context.Background(), "acme")
				err = errors.Join(err, o.Close())
			}
			return err
		},
		"signing-keys": func(s string) error { _, err := handle.ParseSigningKeyring(s); return err },
		"resume-keys":  func(s string) error { _, err := handle.ParseKeyring(s); return err },
		"handle-keys":  func(s string) error { _, err := handle.ParseKeyring(s); return err },
	} {
		a, b := gen(kind), gen(kind)
		if a == b || strings.Contains(a, "\n") {
			t.Errorf("%s: %q then %q: want two different one-line keys", kind, a, b)
		}
		if err := check(a); err != nil {
			t.Errorf("%s: %q does not read back: %v", kind, a, err)
		}
	}
	f := t.TempDir() + "/signing-keys"
	if out := gen("signing-keys", "-o", f); out != "" {
		t.Fatalf("keygen -o printed %q", out)
	}
	st, err := os.Stat(f)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("keygen -o: %v, mode %v; want a 0600 file", err, st)
	}
	before, _ := os.ReadFile(f)
	var out, errb strings.Builder
	if err := run([]string{"keygen", "signing-keys", "-o", f}, &out, &errb); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("keygen -o over an existing file: %v", err)
	}
	if after, _ := os.ReadFile(f); string(after) != string(before) {
		t.Fatal("keygen -o overwrote an existing key file")
	}
	if err := run([]string{"keygen", "nope"}, &out, &errb); err == nil || !strings.Contains(err.Error(), "payload-kek, signing-keys") {
		t.Fatalf("keygen nope: %v", err)
	}
}
