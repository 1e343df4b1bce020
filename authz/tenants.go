package authz

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
)

// Limits bound what one tenant and its owners may have running. A zero field inherits the
// defaults' value; a negative one means no limit.
type Limits struct {
	// RunningJobsPerOwner bounds one owner's jobs that are not finished (queued, awaiting
	// input, running, cancelling) across all kinds.
	RunningJobsPerOwner int `json:"running_jobs_per_owner,omitempty"`
	// RunningJobsPerTenant is the same bound for all of a tenant's owners together.
	RunningJobsPerTenant int `json:"running_jobs_per_tenant,omitempty"`
	// EpisodesInFlightPerTenant bounds the episode concurrency the tenant's unfinished evals
	// hold together (each eval holds its concurrency from start to finish, approval included).
	EpisodesInFlightPerTenant int `json:"episodes_in_flight_per_tenant,omitempty"`
	// StartsPerMinutePerOwner bounds jobs one owner creates in any sliding minute.
	StartsPerMinutePerOwner int `json:"starts_per_minute_per_owner,omitempty"`
}

// TenantPolicy is one tenant's share of the cluster.
type TenantPolicy struct {
	// FairnessWeight is the tenant's weight in task dispatch (Temporal task queue fairness):
	// under contention a tenant gets worker slots in proportion to it. 0 inherits the
	// defaults' weight; the built-in default is 1. Clamped to [0.001, 1000].
	FairnessWeight float64 `json:"fairness_weight,omitempty"`
	Limits
	// EvalBudget is the budget of an eval started without one (start_eval's budget): a
	// tenant's replaces the defaults' as a whole. Nil: none.
	EvalBudget *EvalBudget `json:"eval_budget,omitempty"`
}

// Built-in defaults of [DefaultTenants]: generous enough that only a runaway caller meets them.
const (
	RunningJobsPerOwnerDefault       = 200
	RunningJobsPerTenantDefault      = 1000
	EpisodesInFlightPerTenantDefault = 4096
	StartsPerMinutePerOwnerDefault   = 600
	FairnessWeightDefault            = 1.0
)

// DefaultTenants is what a server runs with when no tenants file is given.
func DefaultTenants() Tenants {
	return Tenants{Defaults: TenantPolicy{FairnessWeight: FairnessWeightDefault, Limits: Limits{
		RunningJobsPerOwner:       RunningJobsPerOwnerDefault,
		RunningJobsPerTenant:      RunningJobsPerTenantDefault,
		EpisodesInFlightPerTenant: EpisodesInFlightPerTenantDefault,
		StartsPerMinutePerOwner:   StartsPerMinutePerOwnerDefault,
	}}}
}

// Unlimited is a configuration with no quotas and equal weights (tests and benchmarks).
func Unlimited() Tenants {
	return Tenants{Defaults: TenantPolicy{FairnessWeight: FairnessWeightDefault, Limits: Limits{-1, -1, -1, -1}}}
}

// For is tenant's effective policy: its overrides over the defaults, field by field.
// Limits come out as 0 for "no limit".
func (t Tenants) For(tenant string) TenantPolicy {
	p := t.Defaults
	if o, ok := t.Tenants[tenant]; ok {
		if o.FairnessWeight != 0 {
			p.FairnessWeight = o.FairnessWeight
		}
		over := func(d *int, v int) {
			if v != 0 {
				*d = v
			}
		}
		over(&p.RunningJobsPerOwner, o.RunningJobsPerOwner)
		over(&p.RunningJobsPerTenant, o.RunningJobsPerTenant)
		over(&p.EpisodesInFlightPerTenant, o.EpisodesInFlightPerTenant)
		over(&p.StartsPerMinutePerOwner, o.StartsPerMinutePerOwner)
	}
	if p.FairnessWeight <= 0 {
		p.FairnessWeight = FairnessWeightDefault
	}
	p.FairnessWeight = min(max(p.FairnessWeight, 0.001), 1000)
	for _, v := range []*int{&p.RunningJobsPerOwner, &p.RunningJobsPerTenant, &p.EpisodesInFlightPerTenant, &p.StartsPerMinutePerOwner} {
		*v = max(*v, 0)
	}
	return p
}

// LoadTenants reads a tenants file (JSON, the shape of [Tenants]). An empty path gives
// [DefaultTenants]. Fields left out of the file's defaults take the built-in defaults.
func LoadTenants(path string) (Tenants, error) {
	if path == "" {
		return DefaultTenants(), nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return Tenants{}, fmt.Errorf("tenants file: %w", err)
	}
	return ParseTenants(raw)
}

// ParseTenants parses a tenants file's contents; see [LoadTenants].
func ParseTenants(raw []byte) (Tenants, error) {
	var t Tenants
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return Tenants{}, fmt.Errorf("tenants file: %w", err)
	}
	base := DefaultTenants().Defaults
	d := &t.Defaults
	if d.FairnessWeight == 0 {
		d.FairnessWeight = base.FairnessWeight
	}
	fill := func(v *int, b int) {
		if *v == 0 {
			*v = b
		}
	}
	fill(&d.RunningJobsPerOwner, base.RunningJobsPerOwner)
	fill(&d.RunningJobsPerTenant, base.RunningJobsPerTenant)
	fill(&d.EpisodesInFlightPerTenant, base.EpisodesInFlightPerTenant)
	fill(&d.StartsPerMinutePerOwner, base.StartsPerMinutePerOwner)
	badWeight := func(p TenantPolicy) bool { return p.FairnessWeight < 0 || p.FairnessWeight > 1000 }
	if badWeight(t.Defaults) {
		return Tenants{}, errors.New("tenants file: defaults: fairness_weight must be in (0, 1000]")
	}
	for _, n := range slices.Sorted(maps.Keys(t.Tenants)) {
		if badWeight(t.Tenants[n]) {
			return Tenants{}, fmt.Errorf("tenants file: tenant %s: fairness_weight must be in (0, 1000]", n)
		}
	}
	if err := checkBudgets(t); err != nil {
		return Tenants{}, err
	}
	for _, n := range slices.Sorted(maps.Keys(t.Notify)) {
		// A key that is no tenant ID would never match a principal's tenant: the operator's
		// endpoints would silently get nothing.
		if err := ValidTenant(n); err != nil {
			return Tenants{}, fmt.Errorf("tenants file: notify: %q is not a tenant ID: %v", n, err)
		}
		if err := checkNotify(t.Notify[n]); err != nil {
			return Tenants{}, fmt.Errorf("tenants file: notify.%s%s", n, err)
		}
	}
	return t, nil
}

// Usage is what a tenant and an owner hold now, as counted by the job store.
type Usage struct {
	OwnerRunning, TenantRunning int
	// TenantEpisodes is the episode concurrency held by the tenant's unfinished evals.
	TenantEpisodes int
	// OwnerStartsLastMinute counts the owner's jobs started in the last minute; OldestStart
	// is the start time of the oldest of the most recent StartsPerMinutePerOwner of them.
	OwnerStartsLastMinute int
	OldestStart           time.Time
}

// QuotaRefusal says which limit a start would break, and when it may pass again.
type QuotaRefusal struct {
	Limit   string // running_jobs_per_owner, …
	Message string
	// RetryAfter is how long until the same start can pass; 0 when it cannot be known
	// (a running job must finish first).
	RetryAfter time.Duration
}

// CheckQuota decides whether a new job holding episodes of episode concurrency may start
// given u (which does not yet include it). nil means it may. Pure; now is the clock.
func CheckQuota(p TenantPolicy, u Usage, episodes int, now time.Time) *QuotaRefusal {
	l := p.Limits
	if l.StartsPerMinutePerOwner > 0 && u.OwnerStartsLastMinute >= l.StartsPerMinutePerOwner {
		var wait time.Duration // unknown while the counted starts are not all visible yet
		if !u.OldestStart.IsZero() {
			wait = max(u.OldestStart.Add(time.Minute).Sub(now), time.Millisecond)
		}
		return &QuotaRefusal{Limit: "starts_per_minute_per_owner", RetryAfter: wait,
			Message: fmt.Sprintf("you started %d jobs in the last minute; the limit is %d per minute", u.OwnerStartsLastMinute, l.StartsPerMinutePerOwner)}
	}
	if l.RunningJobsPerOwner > 0 && u.OwnerRunning >= l.RunningJobsPerOwner {
		return &QuotaRefusal{Limit: "running_jobs_per_owner",
			Message: fmt.Sprintf("you have %d unfinished jobs (awaiting input included); the limit is %d: wait for one to finish or cancel one", u.OwnerRunning, l.RunningJobsPerOwner)}
	}
	if l.RunningJobsPerTenant > 0 && u.TenantRunning >= l.RunningJobsPerTenant {
		return &QuotaRefusal{Limit: "running_jobs_per_tenant",
			Message: fmt.Sprintf("your tenant has %d unfinished jobs (awaiting input included); the limit is %d", u.TenantRunning, l.RunningJobsPerTenant)}
	}
	if l.EpisodesInFlightPerTenant > 0 && episodes > 0 && u.TenantEpisodes+episodes > l.EpisodesInFlightPerTenant {
		free := max(l.EpisodesInFlightPerTenant-u.TenantEpisodes, 0)
		return &QuotaRefusal{Limit: "episodes_in_flight_per_tenant",
			Message: fmt.Sprintf("your tenant's unfinished evals hold %d episode slots of %d; this one asks for %d (concurrency): ask for at most %d or wait", u.TenantEpisodes, l.EpisodesInFlightPerTenant, episodes, free)}
	}
	return nil
}

// Notification event types an endpoint may subscribe to.
const (
	// EventApprovalRequested: a job started waiting for an answer (owner or approver).
	EventApprovalRequested = "approval.requested"
	// EventJobFinished: a job ended (succeeded, failed, cancelled). Opt-in.
	EventJobFinished = "job.finished"
	// EventJobProgress: a running job's progress or status changed; at most one per endpoint
	// per progress_every window, carrying the newest state, never after job.finished. Opt-in.
	EventJobProgress = "job.progress"
)

// Progress windows of an endpoint's job.progress events (NotifyEndpoint.ProgressEvery).
const (
	ProgressEveryDefault = 30 * time.Second
	// ProgressEveryMin keeps an endpoint from turning every job into a steady stream of
	// deliveries and Temporal actions (two per window per job).
	ProgressEveryMin = 5 * time.Second
)

// Notification body formats.
const (
	// NotifyFormatStandard is a Standard Webhooks JSON event (type, timestamp, data).
	NotifyFormatStandard = "standard"
	// NotifyFormatSlack is a Slack incoming-webhook message (blocks and a button to the page),
	// signed with the same Standard Webhooks headers.
	NotifyFormatSlack = "slack"
)

// NotifyEndpoint is one place a tenant's events are sent to. Only the operator names URLs
// (here, in the tenants file); nothing a caller sends ever becomes one.
type NotifyEndpoint struct {
	// Name identifies the endpoint in logs, metrics and the delivery's heartbeat. Defaults to
	// the URL's host.
	Name string `json:"name,omitempty"`
	// URL is where events are POSTed: http or https, no user info. Required.
	URL string `json:"url"`
	// SecretFile holds the Standard Webhooks signing secret ("whsec_<base64>", or raw bytes),
	// read by the worker at start. Required: every delivery is signed.
	SecretFile string `json:"secret_file"`
	// Events are the event types sent (EventApprovalRequested, EventJobFinished,
	// EventJobProgress). Defaults to [approval.requested]; job.finished and job.progress are
	// opt-in.
	Events []string `json:"events,omitempty"`
	// ProgressEvery is the window of job.progress events, a Go duration ("30s", "1m"): at most
	// one per job per window, carrying the newest state. Defaults to 30s; at least 5s.
	ProgressEvery string `json:"progress_every,omitempty"`
	// Format is the body: "standard" (default) or "slack".
	Format string `json:"format,omitempty"`
	// AllowPrivate lets URL name (or resolve to) a loopback, private, link-local or otherwise
	// non-public address. Defaults to false: such addresses are refused at load and at dial.
	AllowPrivate bool `json:"allow_private,omitempty"`
}

// Wants reports whether e is sent events of type event.
func (e NotifyEndpoint) Wants(event string) bool {
	if len(e.Events) == 0 {
		return event == EventApprovalRequested
	}
	return slices.Contains(e.Events, event)
}

// ProgressWindow is e's job.progress window (ProgressEvery, checked at load; the default when
// unset or unreadable).
func (e NotifyEndpoint) ProgressWindow() time.Duration {
	d, err := time.ParseDuration(e.ProgressEvery)
	if err != nil || d < ProgressEveryMin {
		return ProgressEveryDefault
	}
	return d
}

// EndpointName is e's Name, or its URL's host when unnamed.
func (e NotifyEndpoint) EndpointName() string {
	if e.Name != "" {
		return e.Name
	}
	if u, err := url.Parse(e.URL); err == nil {
		return u.Host
	}
	return e.URL
}

// Endpoints are tenant's notification endpoints that want event.
func (t Tenants) Endpoints(tenant, event string) []NotifyEndpoint {
	var out []NotifyEndpoint
	for _, e := range t.Notify[tenant] {
		if e.Wants(event) {
			out = append(out, e)
		}
	}
	return out
}

// checkNotify validates one tenant's notify list; an error starts with the field's path below
// it ("[0].url: …").
func checkNotify(list []NotifyEndpoint) error {
	names := map[string]bool{}
	for i, e := range list {
		field := fmt.Sprintf("[%d]", i)
		// An error shows the URL's scheme and host only: an incoming-webhook URL's path (Slack's
		// /services/T…/B…/secret) and query are its credential, and load errors reach logs.
		u, err := url.Parse(e.URL)
		switch {
		case e.URL == "":
			return fmt.Errorf("%s.url: required", field)
		case err != nil:
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err // without the URL url.Error quotes whole
			}
			return fmt.Errorf("%s.url: not a URL: %v", field, err)
		case u.Scheme != "http" && u.Scheme != "https":
			return fmt.Errorf("%s.url: scheme %q: the scheme must be http or https", field, u.Scheme)
		case u.Host == "" || u.Hostname() == "":
			return fmt.Errorf("%s.url: %s:// has no host", field, u.Scheme)
		case u.User != nil:
			return fmt.Errorf("%s.url: user info is not allowed in a URL; the secret_file signs deliveries", field)
		}
		if !e.AllowPrivate {
			if why := PrivateHost(u.Hostname()); why != "" {
				return fmt.Errorf("%s.url: %q names %s; set \"allow_private\": true on this endpoint to allow it", field, u.Scheme+"://"+u.Host, why)
			}
		}
		if e.SecretFile == "" {
			return fmt.Errorf("%s.secret_file: required (a file holding the signing secret, whsec_<base64>)", field)
		}
		for _, ev := range e.Events {
			if ev != EventApprovalRequested && ev != EventJobFinished && ev != EventJobProgress {
				return fmt.Errorf("%s.events: unknown event %q (known: %s, %s, %s)", field, ev, EventApprovalRequested, EventJobFinished, EventJobProgress)
			}
		}
		if e.ProgressEvery != "" {
			d, err := time.ParseDuration(e.ProgressEvery)
			switch {
			case err != nil:
				return fmt.Errorf("%s.progress_every: %q is not a duration (e.g. \"30s\", \"1m\")", field, e.ProgressEvery)
			case d < ProgressEveryMin:
				return fmt.Errorf("%s.progress_every: %s is below the minimum of %s", field, e.ProgressEvery, ProgressEveryMin)
			}
		}
		if e.Format != "" && e.Format != NotifyFormatStandard && e.Format != NotifyFormatSlack {
			return fmt.Errorf("%s.format: %q (want %s or %s)", field, e.Format, NotifyFormatStandard, NotifyFormatSlack)
		}
		if n := e.EndpointName(); names[n] {
			return fmt.Errorf("%s.name: %q is used twice; name the endpoints apart", field, n)
		} else {
			names[n] = true
		}
	}
	return nil
}

// PrivateHost says why host (a name or an IP literal) is not a public address: "a loopback
// address", …; "" for a public IP or a name other than localhost. Names are checked again,
// resolved, when a delivery dials (see [PrivateIP]).
func PrivateHost(host string) string {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return "a loopback address"
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		return PrivateIP(ip)
	}
	return ""
}

// PrivateIP says why ip is not a public unicast address ("" when it is). Only global unicast
// addresses pass, minus the IANA special-purpose ranges (RFC 6890 and its updates): loopback,
// private (RFC 1918, RFC 4193), link-local (cloud metadata lives there), unspecified, multicast,
// CGNAT, "this network", documentation, benchmarking, reserved, IETF protocol assignments. An
// IPv6 address that carries an IPv4 one (NAT64 64:ff9b::/96, 6to4 2002::/16, IPv4-compatible
// ::/96, IPv4-mapped) is judged by the IPv4 address it reaches: 64:ff9b::7f00:1 is loopback.
func PrivateIP(ip netip.Addr) string {
	ip = ip.WithZone("").Unmap()
	if ip.Is6() {
		b := ip.As16()
		v4 := func(at int) netip.Addr { return netip.AddrFrom4([4]byte(b[at : at+4])) }
		switch {
		case nat64.Contains(ip):
			// Reaches v4 through a NAT64 gateway: as public as v4 is.
			if why := PrivateIP(v4(12)); why != "" {
				return why + " (inside a NAT64 address)"
			}
			return ""
		case sixToFour.Contains(ip):
			if why := PrivateIP(v4(2)); why != "" {
				return why + " (inside a 6to4 address)"
			}
		case ip.IsLoopback():
			return "a loopback address"
		case ip.IsUnspecified():
			return "an unspecified address"
		case v4Compatible.Contains(ip):
			// Deprecated (RFC 4291): never a public destination, whatever it embeds.
			if why := PrivateIP(v4(12)); why != "" {
				return why + " (inside an IPv4-compatible address)"
			}
			return "a reserved address (IPv4-compatible)"
		}
	}
	switch {
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsPrivate():
		return "a private address"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "a link-local address"
	case ip.IsUnspecified():
		return "an unspecified address"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "a multicast address"
	case cgnat.Contains(ip):
		return "a shared (CGNAT) address"
	}
	for _, r := range specialPurpose {
		if r.prefix.Contains(ip) {
			return r.why
		}
	}
	if !ip.IsGlobalUnicast() || (ip.Is6() && !globalUnicast6.Contains(ip)) {
		// IPv6 global unicast is allocated from 2000::/3 only; the rest is reserved by the IETF.
		return "a reserved address"
	}
	return ""
}

var (
	cgnat          = netip.MustParsePrefix("100.64.0.0/10")
	nat64          = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052 well-known prefix
	sixToFour      = netip.MustParsePrefix("2002::/16")    // RFC 3056: IPv4 in bits 16-47
	v4Compatible   = netip.MustParsePrefix("::/96")        // RFC 4291, deprecated
	globalUnicast6 = netip.MustParsePrefix("2000::/3")
)

// specialPurpose are the IANA special-purpose ranges (IPv4 and IPv6 registries) that are not
// globally reachable and that the checks above do not already cover.
var specialPurpose = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "a \"this network\" address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol-assignment address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("192.88.99.0/24"), "a reserved address (6to4 relay anycast)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"}, // also 255.255.255.255, broadcast
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address"},
	{netip.MustParsePrefix("2001::/23"), "an IETF protocol-assignment address (Teredo, ORCHID, …)"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("3fff::/20"), "a documentation address"},
	{netip.MustParsePrefix("5f00::/16"), "a reserved address (SRv6 SIDs)"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
}
