package authz

import (
	"slices"
	"strings"
	"testing"
)

func TestValidTenant(t *testing.T) {
	for _, ok := range []string{"a", "0", "acme", "acme-corp_1", "a-", "a_", strings.Repeat("a", 63)} {
		if err := ValidTenant(ok); err != nil {
			t.Errorf("ValidTenant(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "_a", "Acme", "ac/me", "acme/", "/acme", "ac me", "ac.me", "acmé", "ac\x00me", "ac\nme", strings.Repeat("a", 64)} {
		err := ValidTenant(bad)
		if err == nil {
			t.Errorf("ValidTenant(%q) = nil, want error", bad)
			continue
		}
		if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("ValidTenant error %q echoes input", err)
		}
	}
}

func TestValidSubject(t *testing.T) {
	for _, ok := range []string{"a", "alice@example.com", "user|123", "auth0|abc def", "Zoë", "用户", strings.Repeat("x", 256), strings.Repeat("é", 256)} {
		if err := ValidSubject(ok); err != nil {
			t.Errorf("ValidSubject(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "a\nb", "a\tb", "\x00", "a\x7f", "a\u200bb", "a\u202eb", "\xff", "a\u00a0b", strings.Repeat("x", 257), strings.Repeat("é", 257)} {
		if err := ValidSubject(bad); err == nil {
			t.Errorf("ValidSubject(%q) = nil, want error", bad)
		}
	}
}

func TestPrincipal(t *testing.T) {
	p := Principal{Tenant: "acme", Subject: "alice", Scopes: []Scope{ScopeRead, ScopeApprove}}
	if err := p.Valid(); err != nil {
		t.Fatalf("Valid() = %v", err)
	}
	if !p.Has(ScopeRead) || !p.Has(ScopeApprove) || p.Has(ScopeWrite) || p.Has(ScopeAdmin) {
		t.Errorf("Has wrong for %v", p.Scopes)
	}
	if !p.HasAny(ScopeWrite, ScopeApprove) || p.HasAny(ScopeWrite, ScopeAdmin) || p.HasAny() {
		t.Error("HasAny wrong")
	}
	if (Principal{Tenant: "acme"}).Valid() == nil {
		t.Error("empty subject is valid")
	}
	if (Principal{Subject: "alice"}).Valid() == nil {
		t.Error("empty tenant is valid")
	}
	if (Principal{Tenant: "a/b", Subject: "alice"}).Valid() == nil {
		t.Error("tenant with / is valid")
	}
	for _, s := range AllScopes() {
		if !s.Known() {
			t.Errorf("%s not known", s)
		}
	}
	if Scope("jobs:root").Known() || Scope("").Known() {
		t.Error("unknown scope reported known")
	}
}

func TestParseScopes(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []Scope
	}{
		{"", []Scope{}},
		{"  , ", []Scope{}},
		{"jobs:read", []Scope{R}},
		{"jobs:read jobs:write", []Scope{R, W}},
		{"jobs:admin,jobs:read", []Scope{R, Ad}},
		{" jobs:approve , jobs:write\tjobs:write ", []Scope{W, Ap}},
		{"jobs:admin jobs:approve jobs:write jobs:read", AllScopes()},
	} {
		got, err := ParseScopes(tt.in)
		if err != nil || !slices.Equal(got, tt.want) || got == nil {
			t.Errorf("ParseScopes(%q) = %#v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"jobs:read jobs:root", "JOBS:READ", "jobs:read;jobs:write", "openid"} {
		_, err := ParseScopes(bad)
		if err == nil {
			t.Errorf("ParseScopes(%q) = nil error", bad)
			continue
		}
		if !strings.Contains(err.Error(), "unknown scope") {
			t.Errorf("ParseScopes(%q) error %q does not say unknown scope", bad, err)
		}
	}
	_, err := ParseScopes("jobs:read jobs:root")
	if err == nil || !strings.Contains(err.Error(), `"jobs:root"`) {
		t.Errorf("error %v does not name the unknown scope", err)
	}
}

// TestAllFresh checks that AllScopes and AllActions hand out fresh slices: a
// caller that modifies its copy changes nobody else's list, nor the scope
// order ParseScopes and Verify produce.
func TestAllFresh(t *testing.T) {
	s := AllScopes()
	want := slices.Clone(s)
	s[0], s[3] = ScopeAdmin, ScopeRead
	if got := AllScopes(); !slices.Equal(got, want) {
		t.Errorf("AllScopes() after a caller changed its copy = %v, want %v", got, want)
	}
	if got, err := ParseScopes("jobs:admin jobs:read"); err != nil || !slices.Equal(got, []Scope{ScopeRead, ScopeAdmin}) {
		t.Errorf("ParseScopes after a caller changed its copy = %v, %v", got, err)
	}
	a := AllActions()
	wantA := slices.Clone(a)
	a[0] = "delete"
	if got := AllActions(); !slices.Equal(got, wantA) {
		t.Errorf("AllActions() after a caller changed its copy = %v, want %v", got, wantA)
	}
}
