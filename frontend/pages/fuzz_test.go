package pages

import (
	"flag"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobgate/jobgate/tests/support/testenv"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the committed fuzz seed corpus under testdata/fuzz")

// returnSeeds are FuzzLocalPath's seeds; names starting with "ok" must be accepted.
var returnSeeds = map[string]string{
	"ok_me":        "/me",
	"ok_query":     "/approvals/42?tab=open&x=%2F%2Fevil",
	"ok_unicode":   "/jobs/ü",
	"protocol_rel": "//evil.example/me",
	"backslash":    "/\\evil.example",
	"inner_bslash": "/a\\b",
	"absolute":     "https://evil.example/",
	"scheme":       "javascript:alert(1)",
	"relative":     "me",
	"crlf":         "/me\r\nSet-Cookie: x=y",
	"tab":          "/\t/evil.example",
	"callback":     "/auth/callback?code=x",
	"login":        "/login?return=/me",
	"ok_enc_slash": "/%2Fevil.example", // our host: the path is /%2Fevil.example
	"empty":        "",
	"long":         "/" + strings.Repeat("a", maxReturnLen),
}

func TestReturnSeedCorpus(t *testing.T) {
	testenv.SeedCorpus(t, filepath.Join("testdata", "fuzz", "FuzzLocalPath"), returnSeeds, *updateSeeds, true)
	for name, s := range returnSeeds {
		if got := localPath(s); got != strings.HasPrefix(name, "ok") {
			t.Errorf("%s: localPath(%q) = %v", name, s, got)
		}
	}
}

// FuzzLocalPath: whatever localPath accepts, appended to the public URL, stays on its host (no
// open redirect), and never contains a control character (no header splitting).
func FuzzLocalPath(f *testing.F) {
	base, _ := url.Parse("https://jobs.example.com")
	f.Fuzz(func(t *testing.T, s string) {
		if !localPath(s) {
			return
		}
		u, err := base.Parse(base.String() + s)
		if err != nil {
			t.Fatalf("accepted %q, which does not parse: %v", s, err)
		}
		if u.Host != base.Host || u.Scheme != base.Scheme || u.User != nil {
			t.Fatalf("accepted %q, which leaves the site: %s", s, u)
		}
		// A browser resolves the Location relative to the page, so check that reading too.
		if r, err := base.Parse(s); err != nil || r.Host != base.Host {
			t.Fatalf("accepted %q, which resolves to %v", s, r)
		}
		for _, c := range s {
			if c < 0x20 || c == 0x7f {
				t.Fatalf("accepted %q with a control character", s)
			}
		}
	})
}
