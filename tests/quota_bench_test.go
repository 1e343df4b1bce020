package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
)

// BenchmarkQuotaCheck measures what the quota check adds to a start (README "Fairness and
// quotas"): start_eval p50 for a tenant with quotas (limits far above use, so every start is
// checked and admitted) against a tenant without any (no check), interleaved one at a time, at
// 10 and at 500 unfinished jobs of the checked tenant (the visibility read lists them):
//
//	go test ./tests -run '^$' -bench QuotaCheck -count 3
func BenchmarkQuotaCheck(b *testing.B) {
	on, off := "qb-on-"+randHex(3), "qb-off-"+randHex(3)
	cfg := authz.Unlimited()
	big := authz.Limits{RunningJobsPerOwner: 1 << 30, RunningJobsPerTenant: 1 << 30, EpisodesInFlightPerTenant: 1 << 30, StartsPerMinutePerOwner: 1 << 30}
	cfg.Tenants = map[string]authz.TenantPolicy{on: {Limits: big}}
	bundle := setup(b, setupOpts{noWorker: true, tenants: &cfg})
	csOn := bundle.session(quotaWriter(on, "ann"), 0, "")
	csOff := bundle.session(quotaWriter(off, "ann"), 0, "")
	held := 0
	run := randHex(3)
	for _, want := range []int{10, 500} {
		for ; held < want; held++ {
			mustView(b, call(b, csOn, "start_eval", startArgs(fmt.Sprintf("fill-%s-%d", run, held), 1, nil)))
		}
		b.Run(fmt.Sprintf("Unfinished%d", want), func(b *testing.B) {
			n := max(b.N, 100)
			onLat, offLat := make([]time.Duration, 0, n), make([]time.Duration, 0, n)
			for i := range n {
				// Each checked start adds an unfinished job; fill-ups keep the count near want.
				onLat = append(onLat, timed(func() {
					mustView(b, call(b, csOn, "start_eval", startArgs(fmt.Sprintf("m-%s-%d-%d", run, want, i), 1, nil)))
				}))
				offLat = append(offLat, timed(func() {
					mustView(b, call(b, csOff, "start_eval", startArgs(fmt.Sprintf("m-%s-%d-%d", run, want, i), 1, nil)))
				}))
			}
			held += n
			m, o := p50(onLat), p50(offLat)
			b.ReportMetric(ms(m), "checked_p50_ms")
			b.ReportMetric(ms(o), "unchecked_p50_ms")
			b.ReportMetric(ms(m-o), "delta_p50_ms")
			b.Logf("start_eval p50 with the quota check at ~%d unfinished jobs: %.2f ms vs %.2f ms without (+%.2f ms)", want, ms(m), ms(o), ms(m-o))
		})
	}
}
