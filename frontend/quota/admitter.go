package quota

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
)

// Admitter decides whether a start may begin under its tenant's quotas (see quota.go): one
// per replica, shared by every start of every tenant.
type Admitter struct {
	opts    Options
	store   jobstore.Store
	kinds   []SlotKind
	metrics Metrics
	quotas  quotas
}

// AdmitterOptions configure an Admitter; the frontend fills them from its own Options.
type Options struct {
	// Tenants holds each tenant's limits.
	Tenants authz.Tenants
	// QuotaBudget bounds how long a start waits for its check; QuotaDegraded decides past it,
	// admitting at most QuotaOvershoot unchecked starts of a tenant (see Policy).
	QuotaBudget    time.Duration
	QuotaDegraded  Policy
	QuotaOvershoot int
	// QuotaFresh is how old a check's figures may be to decide a start that they keep far
	// from every limit without waiting for a new check (fast.go); 0 or less: every start waits
	// for a check made after it arrived. The frontend defaults it to FreshDefault.
	QuotaFresh time.Duration
	// TemporalTimeout bounds each store call of a check.
	TemporalTimeout time.Duration
	// Now is the clock.
	Now func() time.Time
	// Logger is the logger of a request's context (its trace fields added).
	Logger func(context.Context) *zap.Logger
}

// SlotKind is a kind whose unfinished jobs hold episode slots, and the most one job holds.
type SlotKind struct {
	Name     string
	MaxSlots int
}

// Metrics receive what admission decides.
type Metrics struct {
	// Degraded counts starts decided by QuotaDegraded, by decision and why.
	Degraded *prometheus.CounterVec
	// Decided counts the other decisions by the figures they used: "recent" (admitFast, no
	// wait) or "check" (a check made after the start arrived). Nil: not counted.
	Decided *prometheus.CounterVec
	// Checks observes each check's duration by scope ("tenant", "owner") and by what took it
	// off ("start", or "refresh": refreshLocked). Nil: not observed.
	Checks *prometheus.HistogramVec
	// Rejected records a quota_exceeded answer: the tenant and the limit.
	Rejected func(tenant, limit string)
}

// NewAdmitter is the admission of starts over store, for the kinds that hold slots.
func New(opts Options, store jobstore.Store, kinds []SlotKind, m Metrics) *Admitter {
	adm := &Admitter{opts: opts, store: store, kinds: kinds, metrics: m}
	adm.quotas.ownersKeep = adm.keepRecent()
	return adm
}

func (adm *Admitter) logger(ctx context.Context) *zap.Logger { return adm.opts.Logger(ctx) }
