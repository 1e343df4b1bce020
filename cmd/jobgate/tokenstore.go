package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

// The token store: what `jobgate login` keeps so every client command can use the person's
// sign-in without JOBGATE_TOKEN. One JSON file, tokens.json in os.UserConfigDir()/jobgate
// (XDG_CONFIG_HOME honoured on Linux), mode 0600 in a 0700 directory, always written to a
// temporary file and renamed over the old one, so a failure leaves the old file whole and
// nothing is ever half-stored. Logins are keyed by issuer + resource: one person may be
// signed in to several servers, and to one server through several identity providers.

// storedLogin is one sign-in: the tokens and what refreshing and revoking them needs.
type storedLogin struct {
	Issuer   string `json:"issuer"`
	Resource string `json:"resource"`
	// URL is the MCP endpoint given to login (--url); commands find their login by it first.
	URL              string `json:"url"`
	ClientID         string `json:"client_id"`
	ClientSecretFile string `json:"client_secret_file,omitempty"` // the path, never the secret
	TokenEndpoint    string `json:"token_endpoint"`
	// RevocationEndpoint is the IdP's RFC 7009 endpoint ("" when it advertises none).
	RevocationEndpoint string    `json:"revocation_endpoint,omitempty"`
	TenantClaim        string    `json:"tenant_claim"`
	AccessToken        string    `json:"access_token"`
	RefreshToken       string    `json:"refresh_token,omitempty"`
	Expiry             time.Time `json:"expiry"`
	SavedAt            time.Time `json:"saved_at"`
}

// tokenFile is tokens.json.
type tokenFile struct {
	Version int           `json:"version"`
	Logins  []storedLogin `json:"logins"`
}

const tokenFileVersion = 1

// tokenStorePath is where the store lives.
func tokenStorePath() (string, error) {
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("token store: %w (set XDG_CONFIG_HOME or HOME)", err)
	}
	return filepath.Join(d, "jobgate", "tokens.json"), nil
}

// loadTokens reads the store; a missing file is an empty store. The file is opened once and
// checked through that open file (no stat of the path afterwards, which a swap between the two
// could fool), not through a symlink. A file others may read is refused (as ssh refuses such a
// key): its tokens may have leaked, and using them quietly would hide that. So is a store in a
// directory others may write, or one owned by another user: they could replace the file.
func loadTokens(path string) (*tokenFile, error) {
	if err := checkStoreDir(filepath.Dir(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openNoFollow, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return &tokenFile{Version: tokenFileVersion}, nil
	}
	if err != nil {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("token store %s is a symlink; jobgate keeps it as a plain file: remove the link and run 'jobgate login'", path)
		}
		return nil, fmt.Errorf("token store: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("token store: %w", err)
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("token store %s is not a regular file (mode %s); remove it and run 'jobgate login'", path, fi.Mode())
	case runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("token store %s is readable by others (mode %04o); run 'chmod 600 %s' (and 'jobgate login' again if others could read it)",
			path, fi.Mode().Perm(), path)
	case foreignOwner(fi):
		return nil, fmt.Errorf("token store %s belongs to another user; remove it and run 'jobgate login'", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return nil, fmt.Errorf("token store: %w", err)
	}
	if len(b) > maxTokenFile {
		return nil, fmt.Errorf("token store %s is larger than %d bytes; delete it and run 'jobgate login'", path, maxTokenFile)
	}
	var tf tokenFile
	if err := json.Unmarshal(b, &tf); err != nil {
		return nil, fmt.Errorf("token store %s: not valid JSON (%v); delete it and run 'jobgate login'", path, err)
	}
	if tf.Version != tokenFileVersion {
		return nil, fmt.Errorf("token store %s: version %d, this jobgate reads version %d; delete it and run 'jobgate login'", path, tf.Version, tokenFileVersion)
	}
	return &tf, nil
}

// maxTokenFile bounds what loadTokens reads: a store holds a few logins of a few kB each.
const maxTokenFile = 4 << 20

// checkStoreDir refuses a store directory that another user owns or may write into: whoever
// can write there can rename their own tokens.json over ours (commands would then act as
// them) or delete it. MkdirAll does not check a directory that already exists, so this does.
// A symlinked directory is followed (dotfile managers link ~/.config); what it points to is
// checked.
func checkStoreDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	switch {
	case !fi.IsDir():
		return fmt.Errorf("token store: %s is not a directory", dir)
	case runtime.GOOS != "windows" && fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("token store directory %s is writable by others (mode %04o); run 'chmod 700 %s'", dir, fi.Mode().Perm(), dir)
	case foreignOwner(fi):
		return fmt.Errorf("token store directory %s belongs to another user; remove it or set XDG_CONFIG_HOME", dir)
	}
	return nil
}

// saveTokens writes the store atomically: a temporary file (0600) in the same directory,
// synced, then renamed over tokens.json.
func saveTokens(path string, tf *tokenFile) error {
	tf.Version = tokenFileVersion
	b, err := json.MarshalIndent(tf, "", "  ")
	if err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	if err := checkStoreDir(dir); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tokens-*.json")
	if err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	// CreateTemp makes the file 0600 already; Chmod says so for umasks and platforms alike.
	if err := f.Chmod(0o600); err != nil && runtime.GOOS != "windows" {
		return fmt.Errorf("token store: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	ok = true
	return nil
}

// index is the position of the login for issuer + resource, or -1.
func (tf *tokenFile) index(issuer, resource string) int {
	for i, l := range tf.Logins {
		if l.Issuer == issuer && sameURL(l.Resource, resource) {
			return i
		}
	}
	return -1
}

// put adds l, replacing the login of the same issuer + resource.
func (tf *tokenFile) put(l storedLogin) {
	if i := tf.index(l.Issuer, l.Resource); i >= 0 {
		tf.Logins[i] = l
		return
	}
	tf.Logins = append(tf.Logins, l)
}

// remove drops the login of issuer + resource; it reports whether there was one.
func (tf *tokenFile) remove(issuer, resource string) bool {
	i := tf.index(issuer, resource)
	if i < 0 {
		return false
	}
	tf.Logins = append(tf.Logins[:i], tf.Logins[i+1:]...)
	return true
}

// forURL finds the login a command against the MCP endpoint u uses: one made with that --url,
// else one for the resource u (the same server by another spelling). Of several (signed in
// through two issuers), the latest wins. nil when there is none.
func (tf *tokenFile) forURL(u string) *storedLogin {
	var best *storedLogin
	for _, match := range []func(storedLogin) bool{
		func(l storedLogin) bool { return sameURL(l.URL, u) },
		func(l storedLogin) bool { return sameURL(l.Resource, u) },
	} {
		for i := range tf.Logins {
			if l := &tf.Logins[i]; match(*l) && (best == nil || l.SavedAt.After(best.SavedAt)) {
				best = l
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// sameURL compares two http(s) URLs as RFC 3986 §6.2.3 does: scheme and host case-insensitive,
// a default port the same as none, an empty path the same as "/", a trailing slash ignored.
func sameURL(a, b string) bool {
	na, oka := normURL(a)
	nb, okb := normURL(b)
	return oka && okb && na == nb
}

func normURL(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "", false
	}
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]" // an IPv6 literal keeps its brackets
	}
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host + strings.TrimSuffix(u.EscapedPath(), "/") + "?" + u.RawQuery, true
}

// refreshMargin: a stored access token this close to its expiry is refreshed before use, so it
// does not expire on the way to the server.
const refreshMargin = 30 * time.Second

// credentials is a command's token source: a token the person gave, or a stored login that
// refreshes itself through x/oauth2 when it expires and saves the rotated tokens. Safe for
// concurrent use (the MCP client may ask from several goroutines).
type credentials struct {
	static string       // a token given with --token, --token-file or JOBGATE_TOKEN
	login  *storedLogin // else the stored login
	path   string       // of the token store
	desc   string       // where the token comes from, for whoami
	mu     sync.Mutex
}

var _ oauth2.TokenSource = (*credentials)(nil)

func (c *credentials) Token() (*oauth2.Token, error) {
	if c.login == nil {
		return &oauth2.Token{AccessToken: c.static, TokenType: "Bearer"}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.login; l.Expiry.IsZero() || time.Until(l.Expiry) > refreshMargin {
		return &oauth2.Token{AccessToken: l.AccessToken, TokenType: "Bearer", Expiry: l.Expiry}, nil
	}
	if err := c.refreshLocked(); err != nil {
		return nil, err
	}
	return &oauth2.Token{AccessToken: c.login.AccessToken, TokenType: "Bearer", Expiry: c.login.Expiry}, nil
}

// refreshLocked trades the refresh token for new tokens and saves them (IdPs rotate refresh
// tokens: the old one is spent, so the new one must be kept or the sign-in is lost).
func (c *credentials) refreshLocked() error {
	l := c.login
	fail := func(why string) error {
		return fmt.Errorf("the sign-in at %s expired and could not be refreshed (%s); run 'jobgate login --url %s'", l.Issuer, why, l.URL)
	}
	if l.RefreshToken == "" {
		return fail("the identity provider gave no refresh token")
	}
	if err := secureURL("token_endpoint", l.TokenEndpoint); err != nil {
		return fail(err.Error()) // login checked it; the file may be older or edited
	}
	secret, err := readClientSecret(l.ClientSecretFile)
	if err != nil {
		return fail(err.Error())
	}
	meta := &serverMetadata{TokenEndpoint: l.TokenEndpoint}
	cfg := oauthConfig(meta, l.ClientID, secret, nil)
	ctx := idpContext(context.Background(), meta, l.ClientID, secret, l.Resource)
	// No access token: x/oauth2 refreshes at once. It keeps the old refresh token when the
	// answer brings none (IdPs that do not rotate).
	nt, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: l.RefreshToken}).Token()
	if err != nil {
		// Another jobgate process may have refreshed first and rotated the refresh token this
		// one still holds: take the tokens it saved.
		if tf, lerr := loadTokens(c.path); lerr == nil {
			if i := tf.index(l.Issuer, l.Resource); i >= 0 && tf.Logins[i].RefreshToken != l.RefreshToken &&
				time.Until(tf.Logins[i].Expiry) > refreshMargin {
				*c.login = tf.Logins[i]
				return nil
			}
		}
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.ErrorCode != "" {
			why := re.ErrorCode
			if re.ErrorDescription != "" {
				why += ": " + cleanText(re.ErrorDescription)
			}
			return fail(why)
		}
		return fail(cleanText(err.Error()))
	}
	next := *l
	next.AccessToken, next.RefreshToken, next.Expiry = nt.AccessToken, nt.RefreshToken, nt.Expiry.UTC()
	if i, _, err := readTokenInfo(nt.AccessToken, l.TenantClaim); err == nil {
		next.Expiry = i.expiry(nt.Expiry)
	}
	tf, err := loadTokens(c.path)
	if err != nil {
		return err
	}
	tf.put(next)
	if err := saveTokens(c.path, tf); err != nil {
		return fmt.Errorf("refreshed the sign-in at %s but could not keep the new tokens: %w", l.Issuer, err)
	}
	*c.login = next
	return nil
}
