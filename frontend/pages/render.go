package pages

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/frontend/handle"
)

//go:embed templates/*.html
var templatesFS embed.FS

// Each page is parsed with the layout it shares (head, header, footer), as frontend/devidp does.
var pageTmpl = map[string]*template.Template{
	"me":      template.Must(template.ParseFS(templatesFS, "templates/me.html", "templates/layout.html")),
	"message": template.Must(template.ParseFS(templatesFS, "templates/message.html", "templates/layout.html")),
}

type pageData struct {
	Title   string
	Message string
	Login   string  // when set, a "Sign in" link to it
	Session *meView // /me only
}

// meView is the session as /me shows it.
type meView struct {
	handle.Session
	Scopes, AMR string
	AuthTime    string
	Expiry      string
	LogoutPath  string
}

func render(w http.ResponseWriter, status int, page string, d pageData) {
	var b bytes.Buffer
	if err := pageTmpl[page].Execute(&b, d); err != nil {
		http.Error(w, "page rendering failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// fail answers with a one-line message for the person and logs the detail for the operator.
// It sets no session cookie.
func (p *Pages) fail(w http.ResponseWriter, r *http.Request, status int, msg string, detail error) {
	fields := []zap.Field{zap.String("path", r.URL.Path), zap.Int("status", status), zap.String("message", msg)}
	if detail != nil {
		fields = append(fields, zap.Error(detail))
	}
	if status >= 500 {
		p.cfg.Logger.Warn("sign-in page error", fields...) // the provider or this server's configuration
	} else {
		p.cfg.Logger.Info("sign-in page error", fields...)
	}
	render(w, status, "message", pageData{Title: "Sign-in problem", Message: msg, Login: p.base + PathLogin})
}

func (p *Pages) me(w http.ResponseWriter, r *http.Request) {
	s, _ := SessionFrom(r.Context())
	v := &meView{Session: s, Scopes: strings.Join(s.Scopes, " "), AMR: strings.Join(s.AMR, " "),
		Expiry: s.Expiry.UTC().Format(time.RFC1123), LogoutPath: p.base + PathLogout}
	if !s.AuthTime.IsZero() {
		v.AuthTime = s.AuthTime.UTC().Format(time.RFC1123)
	}
	render(w, http.StatusOK, "me", pageData{Title: "Signed in", Session: v})
}

func (p *Pages) signedOut(w http.ResponseWriter, r *http.Request) {
	render(w, http.StatusOK, "message", pageData{Title: "Signed out", Message: "You are signed out of jobgate.", Login: p.base + PathLogin})
}

// ParseWithLayout parses the page templates of fsys (patterns as template.ParseFS takes them)
// together with these pages' layout, so other packages' pages (frontend's /approvals and /jobs)
// look like /me: their page calls {{template "head" .Title}} … {{template "foot"}}.
func ParseWithLayout(fsys fs.FS, patterns ...string) (*template.Template, error) {
	t, err := template.ParseFS(fsys, patterns...)
	if err != nil {
		return nil, err
	}
	return t.ParseFS(templatesFS, "templates/layout.html")
}

// SecurityHeaders sets the headers every page of jobgate sends (no script, no framing, no
// caching, no referrer), for pages served by other packages.
func SecurityHeaders(next http.Handler) http.Handler { return securityHeaders(next) }
