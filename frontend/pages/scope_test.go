package pages

import "testing"

// TestScopeText: a budget request's object values are listed as JSON, not Go's map syntax.
func TestScopeText(t *testing.T) {
	for v, want := range map[any]string{"demo": "demo", 150.0: "150", true: "true"} {
		if got := scopeText(v); got != want {
			t.Errorf("scopeText(%v) = %q, want %q", v, got, want)
		}
	}
	if got := scopeText(map[string]any{"max_cost": 0.35}); got != `{"max_cost":0.35}` {
		t.Errorf("object: %q", got)
	}
	if got := scopeText([]any{"a", 1.0}); got != `["a",1]` {
		t.Errorf("list: %q", got)
	}
}
