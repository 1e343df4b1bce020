package handle

import (
	"errors"
	"time"
)

// Browser sign-in (frontend/pages) keeps no server-side session: the session and the state of a
// login in flight are cookies the browser carries, sealed here. Both are encrypted, not only
// signed (they hold the person's name and e-mail, and the PKCE verifier of a login in flight,
// which must stay secret), each under keys of its own derived from the handle keyring with HKDF
// (so every replica opens every cookie, nothing new is configured, and no other sealed string
// opens as one). The format is the cursor's (cursor.go):
//
//	jgx1.<kid>.<base64url(nonce || AES-256-GCM(payload JSON) || tag)>   session
//	jgl1.<kid>.<...>                                                    login state
const (
	// SessionPrefix starts every sealed session; the digit is the format version.
	SessionPrefix = "jgx1"
	// LoginStatePrefix starts every sealed login state; the digit is the format version.
	LoginStatePrefix = "jgl1"

	// MaxSessionLen is the longest sealed session SealSession makes or OpenSession reads. A
	// browser keeps cookies of up to 4096 bytes, name and attributes included; the session
	// cookie's name and attributes take under 120, so 3800 leaves a margin.
	MaxSessionLen = 3800
	// MaxLoginStateLen is the same for login states (a return path of up to 1 KiB fits).
	MaxLoginStateLen = 2048

	// LoginStateTTL is how long a login may take at the identity provider.
	LoginStateTTL = 10 * time.Minute

	sessionLabel    = "jobgate-session-v1"
	loginStateLabel = "jobgate-login-state-v1"

	// maxSessionList bounds the scopes and the amr values a session carries.
	maxSessionList = 64
)

var (
	sessionAEAD    = &aeadSealer{SessionPrefix, sessionLabel, MaxSessionLen}
	loginStateAEAD = &aeadSealer{LoginStatePrefix, loginStateLabel, MaxLoginStateLen}
	sessionKind    = kind[Session, sessionWire]{sessionAEAD, "handle: session", "session"}
	loginStateKind = kind[LoginState, loginStateWire]{loginStateAEAD, "handle: login state", "login state"}
)

// Session is a person signed in to jobgate's pages. Everything in it comes from tokens the
// relying party verified (never from the browser); the cookie only carries it between requests.
type Session struct {
	Issuer   string    // the identity provider that vouched (iss); a session of another is refused
	Subject  string    // sub
	Tenant   string    // from the configured tenant claim
	Scopes   []string  // jobs:* scopes, canonical order
	Name     string    // display only; may be empty
	Email    string    // display only; may be empty
	AuthTime time.Time // when the person authenticated at the IdP (auth_time); zero if the IdP did not say
	AMR      []string  // authentication methods (amr); may be empty
	ACR      string    // authentication context class (acr); may be empty
	// CSRF is the session's anti-forgery token: every form a page renders carries it and every
	// POST must echo it (compared in constant time), on top of the cross-origin check.
	CSRF   string
	Expiry time.Time // second precision
}

type sessionWire struct {
	V int      `json:"v"`
	I string   `json:"i"` // issuer
	S string   `json:"s"` // subject
	T string   `json:"t"` // tenant
	P []string `json:"p"` // scopes
	N string   `json:"n"` // name
	M string   `json:"m"` // e-mail
	A int64    `json:"a"` // auth_time, Unix seconds; 0 = unknown
	R []string `json:"r"` // amr
	C string   `json:"c"` // acr
	X string   `json:"x"` // CSRF token
	E int64    `json:"e"` // expiry, Unix seconds
}

// nonNil keeps the wire canonical: a list is always a list, never null.
func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func timeOrZero(u int64) time.Time {
	if u == 0 {
		return time.Time{}
	}
	return expiryFromUnix(u)
}

func (s Session) wire() sessionWire {
	return sessionWire{V: payloadVersion, I: s.Issuer, S: s.Subject, T: s.Tenant, P: nonNil(s.Scopes), N: s.Name, M: s.Email,
		A: unixOrZero(s.AuthTime), R: nonNil(s.AMR), C: s.ACR, X: s.CSRF, E: s.Expiry.Unix()}
}

func (w sessionWire) header() (int, int64) { return w.V, w.E }

// token refuses a payload without its lists: wire always writes them.
func (w sessionWire) token() (Session, bool) {
	return Session{Issuer: w.I, Subject: w.S, Tenant: w.T, Scopes: w.P, Name: w.N, Email: w.M, AuthTime: timeOrZero(w.A),
		AMR: w.R, ACR: w.C, CSRF: w.X, Expiry: expiryFromUnix(w.E)}, w.P != nil && w.R != nil
}

func (s Session) validateFields() error {
	if err := requireStrings("handle: session", field{"issuer", s.Issuer}, field{"subject", s.Subject},
		field{"tenant", s.Tenant}, field{"CSRF token", s.CSRF}); err != nil {
		return err
	}
	if err := optionalStrings("handle: session", field{"name", s.Name}, field{"e-mail", s.Email},
		field{"acr", s.ACR}); err != nil {
		return err
	}
	if err := requireLists("handle: session", list{"scope values", "scope value", s.Scopes, maxSessionList},
		list{"amr values", "amr value", s.AMR, maxSessionList}); err != nil {
		return err
	}
	return optionalTime("handle: session", "auth time", s.AuthTime)
}

// Validate reports whether SealSession can seal s: fields set and valid, within MaxSessionLen.
func (s Session) Validate() error { return sessionKind.validate(s, "") }

// SealSession returns s encrypted and authenticated with the current key, or "" (which never
// opens) if s is invalid or too long (see [Session.Validate]).
func (k *Keyring) SealSession(s Session) string { return sessionKind.seal(k, s) }

// OpenSession is OpenHandle for sessions: errors match [ErrMalformed] or [ErrExpired]; with
// ErrExpired the decoded Session is returned too. The caller still checks Issuer.
func (k *Keyring) OpenSession(str string, now time.Time) (Session, error) {
	return sessionKind.open(k, str, now)
}

// LoginState is a login in flight: what the relying party sent to the identity provider and
// must find again on the way back. It lives in a cookie scoped to the callback path.
type LoginState struct {
	State    string // the OAuth state parameter, compared with the callback's
	Nonce    string // the OIDC nonce, compared with the ID token's
	Verifier string // the PKCE code verifier (RFC 7636)
	ReturnTo string // the local path to land on after sign-in
	// MaxAge is the max_age sent (0 = none): the callback then demands an ID token whose
	// auth_time is within it.
	MaxAge time.Duration // second precision
	Expiry time.Time
}

type loginStateWire struct {
	V int    `json:"v"`
	S string `json:"s"` // state
	N string `json:"n"` // nonce
	K string `json:"k"` // PKCE verifier
	R string `json:"r"` // return path
	M int64  `json:"m"` // max_age, seconds; 0 = none
	E int64  `json:"e"` // expiry, Unix seconds
}

func (l LoginState) wire() loginStateWire {
	return loginStateWire{V: payloadVersion, S: l.State, N: l.Nonce, K: l.Verifier, R: l.ReturnTo,
		M: int64(l.MaxAge / time.Second), E: l.Expiry.Unix()}
}

func (w loginStateWire) header() (int, int64) { return w.V, w.E }

func (w loginStateWire) token() (LoginState, bool) {
	if w.M < 0 || w.M > maxMaxAge {
		return LoginState{}, false
	}
	return LoginState{State: w.S, Nonce: w.N, Verifier: w.K, ReturnTo: w.R, MaxAge: time.Duration(w.M) * time.Second,
		Expiry: expiryFromUnix(w.E)}, true
}

// maxMaxAge bounds LoginState.MaxAge in seconds (a year; no page asks for more).
const maxMaxAge = 365 * 24 * 3600

func (l LoginState) validateFields() error {
	if err := requireStrings("handle: login state", field{"state", l.State}, field{"nonce", l.Nonce},
		field{"PKCE verifier", l.Verifier}, field{"return path", l.ReturnTo}); err != nil {
		return err
	}
	if l.MaxAge < 0 || l.MaxAge%time.Second != 0 || l.MaxAge > maxMaxAge*time.Second {
		return errors.New("handle: login state max age is negative, not whole seconds or over a year")
	}
	return nil
}

// Validate reports whether SealLoginState can seal l: fields set and valid, within MaxLoginStateLen.
func (l LoginState) Validate() error { return loginStateKind.validate(l, "") }

// SealLoginState returns l encrypted and authenticated with the current key, or "" (which never
// opens) if l is invalid or too long.
func (k *Keyring) SealLoginState(l LoginState) string { return loginStateKind.seal(k, l) }

// OpenLoginState is OpenHandle for login states: errors match [ErrMalformed] or [ErrExpired].
func (k *Keyring) OpenLoginState(str string, now time.Time) (LoginState, error) {
	return loginStateKind.open(k, str, now)
}
