package wire

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

// TestImportsOnlyLeaves keeps the package small for clients: of jobgate it may import only the
// leaves authz and workflows/jobstate, and jobstate imports nothing of jobgate.
func TestImportsOnlyLeaves(t *testing.T) {
	const mod = "github.com/jobgate/jobgate/"
	for dir, allowed := range map[string][]string{
		".":                        {mod + "authz", mod + "workflows/jobstate"},
		"../../workflows/jobstate": nil,
	} {
		for f, ps := range testenv.Imports(t, dir, false) {
			for _, p := range ps {
				if strings.HasPrefix(p, mod) && !contains(allowed, p) {
					t.Errorf("%s imports %s; allowed of jobgate: %v", f, p, allowed)
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestNeedsInputViewJSON: a view carrying its encoding (WithJSON) marshals to those bytes;
// without, to its fields.
func TestNeedsInputViewJSON(t *testing.T) {
	v := NeedsInputView{InputID: "i", Prompt: "p", ScopeDigest: "d", Approver: "owner"}
	plain, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"input_id":"i","prompt":"p","answer_schema":null,"scope_digest":"d","approver":"owner","expires_at":"0001-01-01T00:00:00Z"}`
	if string(plain) != want {
		t.Errorf("plain: %s\nwant %s", plain, want)
	}
	kept, err := json.Marshal(v.WithJSON([]byte(`{"kept":true}`)))
	if err != nil || string(kept) != `{"kept":true}` {
		t.Errorf("with JSON: %s %v", kept, err)
	}
}
