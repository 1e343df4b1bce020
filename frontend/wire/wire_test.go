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

// TestJobViewDecodeResult: a view decoded from get_*'s JSON hands its result over as the
// kind's typed view, and says so when there is none.
func TestJobViewDecodeResult(t *testing.T) {
	var v JobView
	if err := json.Unmarshal([]byte(`{"handle":"h","result":{"rows":3,"sha256":"ab","columns":["id"]}}`), &v); err != nil {
		t.Fatal(err)
	}
	var r ExportResultView
	if err := v.DecodeResult(&r); err != nil || r.Rows != 3 || r.SHA256 != "ab" || len(r.Columns) != 1 {
		t.Fatalf("DecodeResult = %+v, %v", r, err)
	}
	var e EvalResultView
	if err := (&JobView{}).DecodeResult(&e); err == nil {
		t.Fatal("a view without a result decoded")
	}
	if err := v.DecodeResult(&[]int{}); err == nil {
		t.Fatal("an export's result decoded as a list")
	}
}
