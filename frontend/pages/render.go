package pages

import (
	"bytes"
	"embed"
	"html/template"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/jobgate/jobgate/frontend/handle"
)

//go:embed templates/*.html
var templatesFS embed.FS

// pageNames are the pages, one template file each; every one is parsed with the one layout
// (head, navigation, alerts, foot) and the shared parts, so sign-in, approvals and jobs look
// and read alike.
var pageNames = []string{"me", "message", "inbox", "request", "outcome", "jobs", "job"}

var pageTmpl = func() map[string]*template.Template {
	m := map[string]*template.Template{}
	for _, name := range pageNames {
		m[name] = template.Must(template.ParseFS(templatesFS, "templates/"+name+".html", "templates/layout.html", "templates/parts.html"))
	}
	return m
}()

// view is what every page template gets.
type view struct {
	Title   string
	Message string // an error or explanation, shown as an alert
	Notice  string // a success, shown as a status
	// Plain shows the message page's Message as information, not as an alert (signed out).
	Plain bool
	Login string // the message page: a "Sign in" button to it
	Back  string // the message page: a "Back to approvals" link to it
	// Nav shows the job pages' navigation (approvals, my jobs, the person).
	Nav     bool
	Session *handle.Session // the signed-in person, named in the navigation
	Me      *meView         // /me
	Rows    []requestRow    // inbox
	JobRows []jobRow        // my jobs
	Next    string          // the next page's link (signed cursor)
	Req     *requestView
	Job     *jobView
	// Decision and Comment: the outcome page's decision as sent.
	Decision, Comment string
}

// Who names the signed-in person for the navigation.
func (v view) Who() string {
	if v.Session == nil {
		return ""
	}
	if v.Session.Name != "" {
		return v.Session.Name
	}
	return v.Session.Subject
}

// meView is the session as /me shows it.
type meView struct {
	handle.Session
	Scopes, AMR string
	AuthTime    string
	Expiry      string
	LogoutPath  string
}

// render writes page with v; on a template error it answers 500 and returns the error for the
// caller to log.
func render(w http.ResponseWriter, status int, page string, v view) error {
	var b bytes.Buffer
	if err := pageTmpl[page].Execute(&b, v); err != nil {
		http.Error(w, "page rendering failed", http.StatusInternalServerError)
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
	return nil
}

// show renders a sign-in page; a template error is logged for the operator.
func (p *Pages) show(w http.ResponseWriter, status int, page string, v view) {
	if err := render(w, status, page, v); err != nil {
		p.cfg.Logger.Error("page rendering failed: " + err.Error())
	}
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
	p.show(w, status, "message", view{Title: "Sign-in problem", Message: msg, Login: p.base + PathLogin})
}

func (p *Pages) me(w http.ResponseWriter, r *http.Request) {
	s, _ := SessionFrom(r.Context())
	v := &meView{Session: s, Scopes: strings.Join(s.Scopes, " "), AMR: strings.Join(s.AMR, " "),
		Expiry: s.Expiry.UTC().Format(time.RFC1123), LogoutPath: p.base + PathLogout}
	if !s.AuthTime.IsZero() {
		v.AuthTime = s.AuthTime.UTC().Format(time.RFC1123)
	}
	p.show(w, http.StatusOK, "me", view{Title: "Signed in", Me: v})
}

func (p *Pages) signedOut(w http.ResponseWriter, r *http.Request) {
	p.show(w, http.StatusOK, "message", view{Title: "Signed out", Message: "You are signed out of jobgate.", Plain: true, Login: p.base + PathLogin})
}
