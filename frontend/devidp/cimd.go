package devidp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/jobgate/jobgate/authz"
	"github.com/zitadel/oidc/v3/pkg/oidc"
)

// Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document, the registration
// the MCP 2026-07-28 authorization spec recommends): a client_id that is an https URL names a
// JSON document of client metadata the provider fetches (cimd_fetch.go). This file holds the
// rules for the URL and the document; both fail with an error that names the field.

const (
	// CIMDMaxBytes is the largest metadata document the provider reads (the draft recommends
	// 5 kilobytes).
	CIMDMaxBytes = 5 << 10
	// maxClientIDURL bounds a URL client_id, which the pages show.
	maxClientIDURL = 2048
	maxClientName  = 200
)

// cimdError is why a URL client_id cannot be used: always invalid_client (RFC 6749 §5.2), its
// description naming the field.
type cimdError struct{ desc string }

func (e *cimdError) Error() string { return e.desc }

func cimdErrorf(format string, a ...any) *cimdError { return &cimdError{fmt.Sprintf(format, a...)} }

// urlClientID reports whether id is meant as a URL (it has a scheme and "://"), so it is
// resolved as a metadata document, or refused when not https, instead of looked up as a
// registered client. Registered clients' IDs never look like one (jobgate-cli, dcr-…).
func urlClientID(id string) bool {
	i := strings.Index(id, "://")
	if i <= 0 {
		return false
	}
	for _, r := range id[:i] {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// parseClientIDURL checks a URL client_id against the draft's §3: https, a path, no dot
// segments, no fragment, no username or password; a port and a query are allowed.
func parseClientIDURL(id string) (*url.URL, error) {
	if len(id) > maxClientIDURL {
		return nil, cimdErrorf("client_id: a URL of %d characters (at most %d)", len(id), maxClientIDURL)
	}
	u, err := url.Parse(id)
	if err != nil {
		return nil, cimdErrorf("client_id: %q is not a URL", id)
	}
	switch {
	case u.Scheme != "https": // url.Parse lowercases it
		return nil, cimdErrorf("client_id: %q: a URL client_id (Client ID Metadata Document) must use https", id)
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		return nil, cimdErrorf("client_id: %q has no host", id)
	case u.User != nil:
		return nil, cimdErrorf("client_id: %q contains a username or password", id)
	case u.Fragment != "" || strings.Contains(id, "#"):
		return nil, cimdErrorf("client_id: %q has a fragment", id)
	case u.Path == "" || u.Path == "/":
		return nil, cimdErrorf("client_id: %q needs a path, e.g. https://%s/client-metadata.json", id, u.Host)
	}
	for _, p := range []string{u.Path, u.EscapedPath()} {
		for _, seg := range strings.Split(p, "/") {
			if seg == "." || seg == ".." {
				return nil, cimdErrorf("client_id: %q has a %q path segment", id, seg)
			}
		}
	}
	return u, nil
}

// cimdDocument is the client metadata a document may carry that this provider reads; other
// members are ignored (the draft lets a document define more). Secrets are read only to be
// refused.
type cimdDocument struct {
	ClientID  string `json:"client_id"`
	ClientURI string `json:"client_uri,omitempty"`
	clientMetadata
	ClientSecret          json.RawMessage `json:"client_secret,omitempty"`
	ClientSecretExpiresAt json.RawMessage `json:"client_secret_expires_at,omitempty"`
}

// secretAuthMethods are the token_endpoint_auth_methods built on a shared secret, which a
// public document cannot establish (draft §4.1).
var secretAuthMethods = []string{"client_secret_basic", "client_secret_post", "client_secret_jwt"}

// parseCIMD reads the metadata document body fetched from the URL clientID and checks it:
// a JSON object whose client_id is clientID exactly (RFC 3986 §6.2.1 simple string
// comparison), a client_name, 1 to 10 redirect_uris (https, or http on a loopback host), a
// public client (token_endpoint_auth_method "none", no client_secret), the code and refresh
// grants (and the device grant) only. Absent grant_types mean authorization_code and
// refresh_token, as /register reads them.
func parseCIMD(body []byte, clientID string) (*cimdDocument, error) {
	if len(body) > CIMDMaxBytes {
		return nil, cimdErrorf("client_id: the metadata document is larger than %d bytes", CIMDMaxBytes)
	}
	if !utf8.Valid(body) {
		return nil, cimdErrorf("client_id: the metadata document is not UTF-8")
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return nil, cimdErrorf("client_id: the metadata document is not a JSON object")
	}
	var d cimdDocument
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&d); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, cimdErrorf("client_id: the metadata document's %s is not a %s", te.Field, jsonKind(te.Type.Kind().String()))
		}
		return nil, cimdErrorf("client_id: the metadata document is not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, cimdErrorf("client_id: the metadata document has data after its JSON object")
	}
	if err := d.check(clientID); err != nil {
		return nil, err
	}
	return &d, nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "slice":
		return "JSON array of strings"
	case "string":
		return "JSON string"
	}
	return "value of the expected type"
}

// check validates a decoded document against clientID and fills in the defaults.
func (d *cimdDocument) check(clientID string) error {
	if d.ClientID != clientID {
		return cimdErrorf("client_id: the metadata document names client_id %q, not its own URL %q", d.ClientID, clientID)
	}
	switch {
	case d.ClientName == "":
		return cimdErrorf("client_name: required in the metadata document")
	case utf8.RuneCountInString(d.ClientName) > maxClientName:
		return cimdErrorf("client_name: at most %d characters", maxClientName)
	case strings.IndexFunc(d.ClientName, unicode.IsControl) >= 0:
		return cimdErrorf("client_name: contains a control character")
	}
	if d.ClientURI != "" {
		if err := checkClientURI(d.ClientURI); err != nil {
			return err
		}
	}
	if len(d.ClientSecret) > 0 || len(d.ClientSecretExpiresAt) > 0 {
		return cimdErrorf("client_secret: a metadata document must not carry a client secret (it is public)")
	}
	switch m := d.TokenEndpointAuthMethod; {
	case m == "" || m == string(oidc.AuthMethodNone):
		d.TokenEndpointAuthMethod = string(oidc.AuthMethodNone)
	case slices.Contains(secretAuthMethods, m):
		return cimdErrorf("token_endpoint_auth_method: %q needs a shared secret, which a metadata document cannot establish", m)
	default:
		return cimdErrorf("token_endpoint_auth_method: %q is not supported here; only \"none\" (a public client with PKCE)", m)
	}
	if p := d.checkFlows(true); p != nil {
		return cimdErrorf("%s", p.msg)
	}
	return nil
}

// checkClientURI: the client's home page, shown by host on the pages; https, or http on a
// loopback host, without a username or password.
func checkClientURI(s string) error {
	u, err := url.Parse(s)
	if err != nil || !u.IsAbs() || u.Hostname() == "" || len(s) > maxClientIDURL {
		return cimdErrorf("client_uri: %q is not an absolute URL", s)
	}
	if u.User != nil {
		return cimdErrorf("client_uri: %q contains a username or password", s)
	}
	if u.Scheme != "https" && !(u.Scheme == "http" && authz.LoopbackHost(u.Hostname())) {
		return cimdErrorf("client_uri: %q: https, or http on a loopback host only", s)
	}
	return nil
}
