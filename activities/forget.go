package activities

// Forgetting a tenant's artifacts (`jobgate tenant forget`): every object of every export and
// eval job instance of the tenant, whatever its run. Objects are keyed by the job's escaped
// workflow ID ("<tenant>%2F…", ExportPrefix, EpisodesPrefix), so a tenant's objects are found
// by that segment, never by a prefix that could match another tenant's ("acme" vs "acme2").

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// artifactRoots are the prefixes holding job instances: "<root>runs/<first run>/<job>/…", and
// exports' legacy "<root><job>/…".
var artifactRoots = []string{"exports/", "episodes/"}

// ForgetTenant deletes every artifact of tenant's jobs and returns how many objects it
// deleted. Deleting what is already gone succeeds.
func (s *ArtifactStore) ForgetTenant(ctx context.Context, tenant string) (int, error) {
	if tenant == "" || strings.Contains(tenant, "/") {
		return 0, fmt.Errorf("forget artifacts: tenant %q", tenant)
	}
	mark := url.PathEscape(tenant + "/") // how a job ID of the tenant begins, escaped
	n := 0
	for _, root := range artifactRoots {
		it := s.b.List(&blob.ListOptions{Prefix: root})
		for {
			obj, err := it.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return n, fmt.Errorf("list %s: %w", root, err)
			}
			if obj.IsDir || !strings.HasPrefix(jobSegment(strings.TrimPrefix(obj.Key, root)), mark) {
				continue
			}
			if err := s.b.Delete(ctx, obj.Key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
				return n, fmt.Errorf("delete %s: %w", obj.Key, err)
			}
			n++
		}
	}
	return n, nil
}

// jobSegment is the escaped job ID of a key below a root: "runs/<run>/<job>/…" or "<job>/…".
func jobSegment(rest string) string {
	parts := strings.SplitN(rest, "/", 4)
	if parts[0] == "runs" {
		if len(parts) < 3 {
			return ""
		}
		return parts[2]
	}
	return parts[0]
}
