package main

import (
	"os"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
)

// TestTenantForget: forget refuses without --yes or a tenant, then deletes the tenant's keys
// (payload-keys list shows none) and leaves another tenant's.
func TestTenantForget(t *testing.T) {
	kekFile := t.TempDir() + "/kek"
	if err := os.WriteFile(kekFile, []byte(payloadcrypt.NewLocalKEK()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--payload-kek-file", kekFile, "--artifacts", "file://" + t.TempDir()}
	do := func(args ...string) (string, error) {
		var out, errb strings.Builder
		err := run(append(args, flags...), &out, &errb)
		return out.String(), err
	}
	if _, err := do("payload-keys", "rotate", "--tenant", "acme,globex"); err != nil {
		t.Fatal(err)
	}
	if _, err := do("tenant", "forget", "acme"); err == nil || !strings.Contains(err.Error(), "--yes") {
		t.Fatalf("forget without --yes: %v", err)
	}
	if _, err := do("tenant", "forget", "--yes"); err == nil || !strings.Contains(err.Error(), "tenant") {
		t.Fatalf("forget without a tenant: %v", err)
	}
	out, err := do("tenant", "forget", "acme", "--yes")
	if err != nil || !strings.Contains(out, "acme\tpayload keys deleted: 1") || !strings.Contains(out, "artifacts deleted: 0") {
		t.Fatalf("forget: %v\n%s", err, out)
	}
	list, err := do("payload-keys", "list", "--tenant", "acme,globex")
	if err != nil || !strings.Contains(list, "acme\t-\tno key") || strings.Count(list, "globex\t") != 1 || strings.Contains(list, "globex\t-") {
		t.Fatalf("list after forget: %v\n%s", err, list)
	}
}
