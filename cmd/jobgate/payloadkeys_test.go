package main

import (
	"os"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
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
