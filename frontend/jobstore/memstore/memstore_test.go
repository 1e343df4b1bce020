package memstore

import (
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/frontend/jobstore/storetest"
	"github.com/jobgate/jobgate/workflows"
)

func TestStoreSuite(t *testing.T) {
	storetest.Run(t, memHarness())
}

// memHarness seeds the in-memory store directly, on a clock a second per start.
func memHarness() storetest.Harness {
	m := New()
	clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return storetest.Harness{Store: m, Seed: func(t *testing.T, jobs []storetest.Job) {
		for _, s := range jobs {
			clock = clock.Add(time.Second)
			j := &jobstore.Job{ID: s.ID, RunID: "run-" + s.ID, Tenant: s.Tenant, Owner: s.Owner, Kind: s.Kind, Exec: jobstore.RunRunning,
				SAStatus: s.Phase, StartedAt: clock}
			if s.Answerer != "" {
				j.NeedsInput = &workflows.NeedsInput{InputID: "in", Approver: authz.ApproverApprover,
					AllowSelf: s.Answerer == workflows.AnswererApproverOrOwner}
				if s.Answerer == workflows.AnswererOwner {
					j.NeedsInput.Approver = authz.ApproverOwner
				}
			}
			m.Mu.Lock()
			m.Jobs[s.ID] = j
			if s.Slots > 0 {
				m.JobSlots[j.RunID] = s.Slots
			}
			m.Mu.Unlock()
			if s.Continued {
				clock = clock.Add(time.Second)
				j = m.ContinueAsNew(s.ID, clock)
			}
			if s.End != jobstore.RunRunning {
				clock = clock.Add(time.Second)
				m.Mu.Lock()
				j.Exec, j.ClosedAt = s.End, clock
				m.Mu.Unlock()
			}
		}
	}}
}
