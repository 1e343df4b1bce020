package frontend

import "github.com/jobgate/jobgate/authz"

// UIURLFor values (Options.UIURLFor).
const (
	UIURLForAdmin = "admin" // principals holding jobs:admin
	UIURLForAll   = "all"   // everyone (jobgate dev: the tour links to the UI)
	UIURLForNone  = "none"
)

// showUIURL reports whether p gets ui_url in job views: the Web UI shows every job of the
// namespace and is an operator tool, not a tenant surface.
func (f *Frontend) showUIURL(p authz.Principal) bool {
	if f.opts.UIBaseURL == "" {
		return false
	}
	switch f.opts.UIURLFor {
	case UIURLForAll:
		return true
	case UIURLForAdmin:
		return p.Has(authz.ScopeAdmin)
	}
	return false
}
