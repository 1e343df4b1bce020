package handle

import (
	"testing"
	"time"
)

// TestState_InvalidDeterministic: a State with several bad fields is refused with the same
// error every time, naming the first bad field in declaration order (validateFields iterates a
// fixed list, not a map).
func TestState_InvalidDeterministic(t *testing.T) {
	ring := testRing(t)
	// Every string field empty: each could be the one named.
	bad := State{Expiry: testNow.Add(time.Hour)}
	const want = "handle: request state tenant is empty or not UTF-8"
	for i := range 20 {
		err := bad.Validate()
		if err == nil || err.Error() != want {
			t.Fatalf("Validate #%d: %v, want %q", i, err, want)
		}
		if s := ring.SealState(bad); s != "" {
			t.Fatalf("SealState sealed an invalid State: %q", s)
		}
	}
	// Later fields are still checked, in order: with tenant and subject set, the workflow ID is named.
	bad.Tenant, bad.Subject, bad.Tool = "acme", "ana", "\xff"
	for i := range 20 {
		if err := bad.Validate(); err == nil || err.Error() != "handle: request state workflow ID is empty or not UTF-8" {
			t.Fatalf("Validate #%d: %v, want the workflow ID named", i, err)
		}
	}
}
