// groups.go refreshes a busy tenant's owners' figures with counts of groups of owners instead
// of one count per owner. A group's count (its owners' running jobs, or their starts of the
// minute) bounds each member's, exactly as the tenant's count bounds every owner's
// (ownerBounded): the bound is just tighter. admitFast uses such figures like any owner's;
// an owner they leave too near a limit falls to its own count (admitOwnerCounted), so the
// groups change how many counts are asked, never a decision near a limit.
//
// Why: the many-owners benchmark (50 owners of one tenant, 500 starts on two replicas) asked
// 100 owner counts in under two seconds once the tenant's figures stopped sparing the owners
// theirs (tenantBoundNearing). On the SQLite dev server's one connection they queued ahead of
// the starts' own writes: start p99 246–362 ms against 172–185 ms with the owner limits off.
// Groups sized to the tenant's figures ask about a tenth of that.

package quota

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
)

// ownersGroup is the owner of a tenant's owner-groups flight key. No subject is it: a filter
// refuses control characters (jobstore.StoreValue), and so does the verifier's subject.
const ownersGroup = "\x00owners"

// groupOwnersMax bounds the owners one count names (the length of its IN list).
const groupOwnersMax = 64

// ownersSnap is what an owner-groups flight measured: each owner's figures, bounded by its
// group's counts.
type ownersSnap struct {
	owners map[string]*ownerSnap
}

// ownerRefreshKey is the flight that refreshes p's owner figures in the background: its
// tenant's owner groups when the tenant's figures t size them, else the owner's own.
func ownerRefreshKey(p authz.Principal, t *tenantSnap) flightKey {
	if t == nil {
		return flightKey{p.Tenant, p.Subject}
	}
	return flightKey{p.Tenant, ownersGroup}
}

// activeOwnersLocked is the owners of tenant an owner-groups flight refreshes: those with a
// reservation on this replica, and those whose figures a start used within keep (q.mu held).
func (q *quotas) activeOwnersLocked(tenant string, now time.Time, keep time.Duration) []string {
	set := map[string]bool{}
	for _, r := range q.pending[tenant] {
		set[r.owner] = true
	}
	for k, c := range q.recent {
		if k.tenant == tenant && k.owner != "" && now.Sub(c.used) <= keep {
			set[k.owner] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// tenantEstimate is tenant's last figures' unfinished jobs and starts of the minute, with
// this replica's reservations since (0 when it has none).
func (q *quotas) tenantEstimate(tenant string) (running, recent int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	c, ok := q.recent[flightKey{tenant, ""}]
	if !ok {
		return 0, 0
	}
	t := c.res.(*tenantSnap)
	n := len(withLater(t.rs, q.pending[tenant], c.seq))
	return t.running + n, t.recent + n
}

// measureOwners counts fl.owners in groups: first as many as the tenant's figures say it takes
// for each to hold under a quarter of the owner limits' far value (the share from which
// measureOwner counts an owner's own), then each group at or over that is halved and counted
// again, down to single owners. Each member's figures are its group's counts.
func (adm *Admitter) measureOwners(ctx context.Context, k flightKey, pol authz.TenantPolicy, fl *flight) (*ownersSnap, error) {
	out := &ownersSnap{owners: map[string]*ownerSnap{}}
	l := pol.Limits
	far, ok := adm.farLimits(l, 0, 1)
	sc, err := quotaScopeOf(k.tenant, "", fl.rs)
	if !ok || err != nil || (l.RunningJobsPerOwner <= 0 && l.StartsPerMinutePerOwner <= 0) {
		return out, err // no figures a start could use far from the limits
	}
	var owners []string
	for _, o := range fl.owners {
		if s, err := quotaScopeOf(k.tenant, o, nil); err == nil && s.hasOwner {
			owners = append(owners, o)
		}
	}
	if len(owners) == 0 {
		return out, nil
	}
	now := adm.opts.Now()
	runTarget, recTarget := max(far.RunningJobsPerOwner/ownersCountedFrom, 1), max(far.StartsPerMinutePerOwner/ownersCountedFrom, 1)
	needRun := l.RunningJobsPerOwner > 0
	// The tenant's starts of the minute bound every owner's while they stay under the limit
	// (decide): counted only past that, as measureOwner.
	needRec := l.StartsPerMinutePerOwner > 0 && !adm.quotas.tenantRecentBelow(k.tenant, far.StartsPerMinutePerOwner-len(fl.rs), now)
	if !needRun && !needRec {
		return out, nil
	}
	var epoch time.Time
	if needRec {
		epoch = adm.quotas.epoch(k.tenant, now)
	}
	estRun, estRec := adm.quotas.tenantEstimate(k.tenant)
	groups := (len(owners) + groupOwnersMax - 1) / groupOwnersMax
	if needRun {
		groups = max(groups, (estRun+runTarget-1)/runTarget)
	}
	if needRec {
		groups = max(groups, (estRec+recTarget-1)/recTarget)
	}
	groups = min(groups, len(owners))
	var count func(group []string) error
	count = func(group []string) error {
		f := sc.tenant
		f.Owners = group
		var run, rec int
		counts := map[*int]jobstore.Filter{}
		if needRun {
			counts[&run] = running(f)
		}
		if needRec {
			counts[&rec] = createdSince(f, now.Add(-time.Minute))
		}
		if err := adm.countAll(ctx, counts); err != nil {
			return err
		}
		if len(group) > 1 && (needRun && run >= runTarget || needRec && rec >= recTarget) {
			h := len(group) / 2
			if err := count(group[:h]); err != nil {
				return err
			}
			return count(group[h:])
		}
		for _, o := range group {
			out.owners[o] = &ownerSnap{rs: fl.rs, owner: true, running: run, runningCounted: needRun, recent: rec, recentCounted: needRec}
			if needRec {
				adm.quotas.noteOwnerBase(flightKey{k.tenant, o}, ownerBase{c: rec, epoch: epoch})
			}
		}
		return nil
	}
	for i := range groups {
		if err := count(owners[i*len(owners)/groups : (i+1)*len(owners)/groups]); err != nil {
			return nil, err
		}
	}
	return out, nil
}
