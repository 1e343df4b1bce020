package frontend

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobgate/jobgate/tests/support/testenv"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/handle"
	"github.com/jobgate/jobgate/frontend/jobcore"
	"github.com/jobgate/jobgate/frontend/jobstore/memstore"
)

func sealTestCursor(k *handle.Keyring, p authz.Principal, tool string, lf jobcore.ListFilter, exp time.Time) string {
	return k.SealCursor(handle.Cursor{Tenant: p.Tenant, Subject: p.Subject, Tool: tool, Filter: lf.Fingerprint(),
		PageToken: []byte(`{"CloseTime":"9999-12-31T23:59:59Z","StartTime":"2030-01-01T11:00:00Z","RunID":"r1"}`), Expiry: exp})
}

func TestOpenListCursor(t *testing.T) {
	f := newListFrontend(t, memstore.New())
	k := f.Opts.Keys
	lf := jobcore.ListFilter{PageSize: 7, Kind: "eval"}
	fp := lf.Fingerprint()
	valid := sealTestCursor(k, listAna, jobcore.ListToolName, lf, listNow.Add(time.Minute))

	tok, err := f.OpenListCursor(listAna, jobcore.ListToolName, valid, fp)
	if err != nil || len(tok) == 0 {
		t.Fatalf("valid cursor: %q, %v", tok, err)
	}
	// Scopes are not part of the binding (the tenant-wide flag is, through the filters).
	if _, err := f.OpenListCursor(authz.Principal{Tenant: "acme", Subject: "ana", Scopes: []authz.Scope{authz.ScopeRead}}, jobcore.ListToolName, valid, fp); err != nil {
		t.Errorf("same principal, fewer scopes: %v", err)
	}

	bo := authz.Principal{Tenant: "acme", Subject: "bo"}
	gus := authz.Principal{Tenant: "globex", Subject: "ana"}
	expired := sealTestCursor(k, listAna, jobcore.ListToolName, lf, listNow)
	for name, tc := range map[string]struct {
		p   authz.Principal
		raw string
		fp  string
	}{
		"other sub":                {bo, valid, fp},
		"other tenant":             {gus, valid, fp},
		"other page_size":          {listAna, valid, jobcore.ListFilter{PageSize: 8, Kind: "eval"}.Fingerprint()},
		"other kind":               {listAna, valid, jobcore.ListFilter{PageSize: 7, Kind: "export"}.Fingerprint()},
		"no kind":                  {listAna, valid, jobcore.ListFilter{PageSize: 7}.Fingerprint()},
		"status added":             {listAna, valid, jobcore.ListFilter{PageSize: 7, Kind: "eval", Status: "queued"}.Fingerprint()},
		"tenant-wide":              {listAna, valid, jobcore.ListFilter{PageSize: 7, Kind: "eval", All: true}.Fingerprint()},
		"other tool":               {listAna, sealTestCursor(k, listAna, "list_exports", lf, listNow.Add(time.Minute)), fp},
		"expired, other sub":       {bo, expired, fp},
		"expired, other filters":   {listAna, expired, jobcore.ListFilter{PageSize: 7}.Fingerprint()},
		"expired, other tool":      {listAna, sealTestCursor(k, listAna, "get_eval", lf, listNow), fp},
		"tampered payload":         {listAna, flipByte(valid, len("jgc2.k1.")+10), fp},
		"tampered signature":       {listAna, flipByte(valid, len(valid)-2), fp},
		"truncated":                {listAna, valid[:len(valid)-1], fp},
		"truncated to the payload": {listAna, valid[:strings.LastIndexByte(valid, '.')], fp},
		"a handle": {listAna, k.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: "acme/eval/x", Kind: "eval",
			Expiry: listNow.Add(time.Hour)}), fp},
		"other keyring": {listAna, otherRing(t).SealCursor(handle.Cursor{Tenant: "acme", Subject: "ana", Tool: jobcore.ListToolName,
			Filter: fp, PageToken: []byte("x"), Expiry: listNow.Add(time.Minute)}), fp},
		"page_2":  {listAna, "page_2", fp},
		"spaces":  {listAna, " " + valid, fp},
		"too big": {listAna, valid + strings.Repeat("A", handle.MaxCursorLen), fp},
	} {
		_, err := f.OpenListCursor(tc.p, jobcore.ListToolName, tc.raw, tc.fp)
		if te := wantCode(t, name, err, jobcore.CodeCursorInvalid); te != nil && te.Retryable {
			t.Errorf("%s: cursor_invalid must not be retryable", name)
		}
	}
	_, err = f.OpenListCursor(listAna, jobcore.ListToolName, expired, fp)
	if te := wantCode(t, "expired", err, jobcore.CodeCursorExpired); te != nil &&
		(!strings.Contains(te.Message, "first page") || !strings.Contains(te.Message, "without cursor")) {
		t.Errorf("cursor_expired message %q does not say to restart without cursor", te.Message)
	}
}

func flipByte(s string, i int) string {
	b := []byte(s)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

func otherRing(t testing.TB) *handle.Keyring {
	k, err := handle.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{0x2c}, handle.MinKeyLen)})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// ---------------------------------------------------------------- the tool, against a fake

// listSeeds are FuzzListCursor's named seeds, deterministic (fixed keys and clock). The name
// says the outcome for listAna listing with listSeedFilter: ok, invalid or expired.
var listSeedFilter = jobcore.ListFilter{PageSize: 7, Kind: "eval"}

func listSeeds(t testing.TB) map[string]string {
	k := listTestKeys(t)
	old, _ := handle.NewKeyring("k0", map[string][]byte{"k0": bytes.Repeat([]byte{0x0a}, handle.MinKeyLen)})
	valid := sealTestCursor(k, listAna, jobcore.ListToolName, listSeedFilter, listNow.Add(time.Minute))
	bo := authz.Principal{Tenant: "acme", Subject: "bo"}
	return map[string]string{
		"ok_valid":           valid,
		"ok_old_kid":         sealTestCursor(old, listAna, jobcore.ListToolName, listSeedFilter, listNow.Add(time.Minute)),
		"expired":            sealTestCursor(k, listAna, jobcore.ListToolName, listSeedFilter, listNow),
		"invalid_other_sub":  sealTestCursor(k, bo, jobcore.ListToolName, listSeedFilter, listNow.Add(time.Minute)),
		"invalid_other_tool": sealTestCursor(k, listAna, "list_other", listSeedFilter, listNow.Add(time.Minute)),
		"invalid_filters":    sealTestCursor(k, listAna, jobcore.ListToolName, jobcore.ListFilter{PageSize: 7}, listNow.Add(time.Minute)),
		"invalid_expired_bo": sealTestCursor(k, bo, jobcore.ListToolName, listSeedFilter, listNow),
		"invalid_tampered":   flipByte(valid, len("jgc2.k1.")+12),
		"invalid_truncated":  valid[:len(valid)-4],
		"invalid_handle": k.SealHandle(handle.Handle{Tenant: "acme", WorkflowID: "acme/eval/x", Kind: "eval",
			Expiry: listNow.Add(time.Hour)}),
		"invalid_garbage": "jgc2.k1.!!",
	}
}

// TestListCursorSeedCorpus keeps testdata/fuzz/FuzzListCursor in step with listSeeds and checks
// each seed's outcome. Rewrite with: go test ./frontend -run TestListCursorSeedCorpus -update-list-seeds
func TestListCursorSeedCorpus(t *testing.T) {
	f := newListFrontend(t, memstore.New())
	dir := filepath.Join("testdata", "fuzz", "FuzzListCursor")
	seeds := listSeeds(t)
	testenv.SeedCorpus(t, dir, seeds, *updateListSeeds, false)
	for name, s := range seeds {
		_, err := f.OpenListCursor(listAna, jobcore.ListToolName, s, listSeedFilter.Fingerprint())
		switch {
		case strings.HasPrefix(name, "ok_"):
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		case strings.HasPrefix(name, "expired"):
			wantCode(t, name, err, jobcore.CodeCursorExpired)
		default:
			wantCode(t, name, err, jobcore.CodeCursorInvalid)
		}
	}
}

// FuzzListCursor: whatever the string, openListCursor answers a page token only for a cursor
// this service sealed for exactly this caller, tool and filters, and otherwise exactly
// cursor_invalid or cursor_expired (binding before expiry); it never panics.
func FuzzListCursor(f *testing.F) {
	fe := newListFrontend(f, memstore.New())
	fp := listSeedFilter.Fingerprint()
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := fe.OpenListCursor(listAna, jobcore.ListToolName, s, fp)
		c, oerr := fe.Opts.Keys.OpenCursor(s, listNow)
		bound := oerr == nil || errors.Is(oerr, handle.ErrExpired)
		bound = bound && c.Tenant == listAna.Tenant && c.Subject == listAna.Subject && c.Tool == jobcore.ListToolName && c.Filter == fp
		var te *jobcore.ToolError
		switch {
		case err == nil:
			if !bound || oerr != nil || len(tok) == 0 || !bytes.Equal(tok, c.PageToken) {
				t.Fatalf("accepted %q: token %q, cursor %+v, %v", s, tok, c, oerr)
			}
		case !errors.As(err, &te):
			t.Fatalf("%q: non-tool error %v", s, err)
		case te.Code == jobcore.CodeCursorExpired:
			if !bound || !errors.Is(oerr, handle.ErrExpired) {
				t.Fatalf("%q: cursor_expired for an unbound or unexpired cursor (%+v, %v)", s, c, oerr)
			}
		case te.Code == jobcore.CodeCursorInvalid:
			if bound {
				t.Fatalf("%q: cursor_invalid for a bound cursor (%+v, %v)", s, c, oerr)
			}
		default:
			t.Fatalf("%q: code %s", s, te.Code)
		}
	})
}
