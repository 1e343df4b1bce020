package devidp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"html/template"
	"net/http"
	"net/url"

	"github.com/jobgate/jobgate/authz"
	"github.com/zitadel/oidc/v3/pkg/op"
)

var randRead = rand.Read

// csrfToken binds the picker form to its auth request: a cross-site page
// cannot post a login for a request it did not see the page of.
func (i *IdP) csrfToken(authRequestID string) string {
	m := hmac.New(sha256.New, i.csrf[:])
	m.Write([]byte("login\x00" + authRequestID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

type loginData struct {
	Action, AuthRequestID, ClientID, CSRF, Error string
	// ClientName is how the page names the client (a metadata document's client_name is marked
	// as the client's own claim); RedirectHost is where the browser goes back to, and
	// LoopbackRedirect says that is a program on this machine (MCP 2026-07-28 authorization:
	// show the redirect URI's host, warn about localhost-only redirects).
	ClientName, RedirectHost string
	LoopbackRedirect         bool
	Users                    []User
}

func (i *IdP) loginPage(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("authRequestID")
	ar, err := i.store.AuthRequestByID(r.Context(), id)
	if err != nil {
		http.Error(w, "unknown or expired sign-in request (authRequestID); start again from the application", http.StatusBadRequest)
		return
	}
	d := loginData{AuthRequestID: id, ClientID: ar.GetClientID(), ClientName: ar.GetClientID()}
	if c, err := i.store.clientErr(r.Context(), ar.GetClientID()); err == nil && c.name != "" {
		d.ClientName = c.name
	}
	if u, err := url.Parse(ar.GetRedirectURI()); err == nil {
		d.RedirectHost, d.LoopbackRedirect = u.Host, authz.LoopbackHost(u.Hostname())
	}
	i.renderLogin(w, http.StatusOK, d)
}

func (i *IdP) renderLogin(w http.ResponseWriter, status int, d loginData) {
	d.Action = i.path + "/login"
	d.CSRF = i.csrfToken(d.AuthRequestID)
	d.Users = i.users
	renderPage(w, status, loginTmpl, d)
}

func (i *IdP) loginSubmit(w http.ResponseWriter, r *http.Request) {
	id, ok := postedForm(w, r, "authRequestID", i.csrfToken, "sign-in")
	if !ok {
		return
	}
	if err := i.store.completeAuth(id, r.PostForm.Get("user")); err != nil {
		http.Error(w, "user or authRequestID: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx := op.ContextWithIssuer(r.Context(), i.issuer)
	http.Redirect(w, r, op.AuthCallbackURL(i.provider)(ctx, id), http.StatusFound)
}

// renderPage writes one of the pages (the picker, the device page) with status.
func renderPage(w http.ResponseWriter, status int, tmpl *template.Template, data any) {
	setPageHeaders(w)
	w.WriteHeader(status)
	_ = tmpl.Execute(w, data)
}

// postedForm reads a page's POSTed form (at most 4 KiB) and returns its field key once the
// form's csrf token is the one token issues for that value; otherwise it answers 400 (a bad
// form) or 403 (naming the page to reload) and returns false.
func postedForm(w http.ResponseWriter, r *http.Request, key string, token func(string) string, page string) (string, bool) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return "", false
	}
	v := r.PostForm.Get(key)
	if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(token(v))) {
		http.Error(w, "csrf: missing or wrong token; reload the "+page+" page", http.StatusForbidden)
		return "", false
	}
	return v, true
}

func setPageHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The picker must never be framed (clickjacking a sign-in).
	w.Header().Set("X-Frame-Options", "DENY")
	// No form-action: browsers apply it to the redirects after a submit too, and the picker's
	// POST ends at the client's redirect URI on another origin (a loopback CLI, jobgate's pages),
	// which form-action 'self' blocked in Chromium. The forms are this package's own.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
}
