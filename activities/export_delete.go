package activities

// Deleting export objects: DeleteExport and the prefix deletion that FinalizeExport's
// cleanup shares.

import (
	"context"
	"fmt"
	"io"

	"github.com/jobgate/jobgate/activities/contract"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// deletePrefix deletes every object under prefix. Objects already gone are fine: another
// attempt may be deleting the same ones.
func (s *ArtifactStore) deletePrefix(ctx context.Context, prefix string) error {
	var keys []string
	it := s.b.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", prefix, err)
		}
		if !obj.IsDir {
			keys = append(keys, obj.Key)
		}
	}
	for _, k := range keys {
		if err := s.b.Delete(ctx, k); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return fmt.Errorf("delete %s: %w", k, err)
		}
	}
	return nil
}

// DeleteExport deletes every object of one export job instance: artifact, manifest and any
// chunks, under ExportPrefix(JobID, FirstRunID) only. Deleting what is already gone succeeds.
func (a *Activities) DeleteExport(ctx context.Context, in contract.DeleteExportInput) error {
	if in.JobID == "" {
		return invalid("no job_id")
	}
	store, err := a.store()
	if err != nil {
		return err
	}
	return store.deletePrefix(ctx, ExportPrefix(in.JobID, in.FirstRunID))
}

// DeleteEpisodes deletes one eval job instance's episode log (every segment and the whole log)
// once its suite's episode_retention has passed: the eval's retention child calls it.
// Idempotent: what is gone already is not an error.
func (a *Activities) DeleteEpisodes(ctx context.Context, in contract.DeleteEpisodesInput) error {
	if in.JobID == "" || in.FirstRunID == "" {
		return invalid("no job_id or first_run_id")
	}
	store, err := a.store()
	if err != nil {
		return err
	}
	return store.deletePrefix(ctx, EpisodesPrefix(in.JobID, in.FirstRunID))
}
