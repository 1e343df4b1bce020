package jobcore

import (
	"strings"
	"testing"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
)

// TestJobIDPerOwner: the workflow ID carries tenant, kind, owner and key, splits into exactly
// four '/'-free parts whatever the subject, never reads as a path step, and stays within
// Temporal's 1000-byte ID limit for the longest tenant, kind, subject and key we accept.
func TestJobIDPerOwner(t *testing.T) {
	for sub, want := range map[string]string{
		"ana":                      "acme/eval/ana/k1",
		"user:alice@example.com":   "acme/eval/user:alice@example.com/k1",
		"auth0|5f3a":               "acme/eval/auth0|5f3a/k1",
		"https://idp.example/u/42": "acme/eval/https:%2F%2Fidp.example%2Fu%2F42/k1",
		"50%/~x":                   "acme/eval/50%25%2F%7Ex/k1",
		"Ana Lima":                 "acme/eval/Ana%20Lima/k1",
		"josé":                     "acme/eval/jos%C3%A9/k1",
		".":                        "acme/eval/%2E/k1",
		"..":                       "acme/eval/%2E%2E/k1",
		"...":                      "acme/eval/.../k1",
		`o'neil "x" a\b`:           "acme/eval/o%27neil%20%22x%22%20a%5Cb/k1",
	} {
		if got := jobID("acme", "eval", sub, "k1"); got != want {
			t.Errorf("jobID(%q) = %q, want %q", sub, got, want)
		}
	}
	// Every ID can be quoted into a visibility query the store matches (quota checks query IDs).
	for _, sub := range []string{"o'neil", `a\b`, `"q"`, "'x'"} {
		if id := jobID("acme", "eval", sub, "k1"); !jobstore.OwnerMatchable(id) || strings.ContainsAny(id, `'"\`) {
			t.Errorf("job ID %q cannot be matched in a visibility query", id)
		}
	}
	// Distinct subjects, distinct IDs — also against their own escapes and the digest form.
	subs := []string{"a/b", "a%2Fb", "a%252Fb", "~" + strings.Repeat("0", 64), strings.Repeat("/", 256), strings.Repeat("é", 256),
		strings.Repeat("é", 255) + "e", strings.Repeat("x", 200), strings.Repeat("x", 201)}
	seen := map[string]string{}
	longest := strings.Repeat("t", authz.MaxTenantLen)
	for _, sub := range subs {
		if authz.ValidSubject(sub) != nil {
			t.Fatalf("test subject %q is not valid", sub)
		}
		id := jobID("acme", "eval", sub, "k1")
		if prev, dup := seen[id]; dup {
			t.Fatalf("subjects %q and %q share job ID %q", prev, sub, id)
		}
		seen[id] = sub
		if parts := strings.Split(id, "/"); len(parts) != 4 || parts[0] != "acme" || parts[3] != "k1" {
			t.Fatalf("job ID %q does not split into tenant/kind/owner/key", id)
		}
		long := jobID(longest, strings.Repeat("k", 32), sub, strings.Repeat("K", 128))
		if len(long) > 1000 || len(strings.Split(long, "/")[2]) > ownerSegmentMax+1 {
			t.Fatalf("job ID for %q is %d bytes", sub, len(long))
		}
	}
}
