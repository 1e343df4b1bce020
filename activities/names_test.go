package activities

import (
	"reflect"
	"testing"

	"github.com/jobgate/jobgate/activities/contract"
)

// Workflows execute activities by the names in contract; a worker registers the methods of
// these types under the same names, so each name must stay a method's.
func TestActivityNamesAreMethods(t *testing.T) {
	for typ, names := range map[reflect.Type][]string{
		reflect.TypeFor[*Activities](): {contract.RunEpisodeActivityName, contract.WriteEpisodesActivityName,
			contract.PlanExportActivityName, contract.ExportPartActivityName, contract.FinalizeExportActivityName,
			contract.DeleteExportActivityName, contract.FixtureTextActivityName},
		reflect.TypeFor[*Notifier](): {contract.NotifyActivityName, contract.NotifyProgressActivityName},
	} {
		for _, n := range names {
			if _, ok := typ.MethodByName(n); !ok {
				t.Errorf("%s has no method %s", typ, n)
			}
		}
	}
}
