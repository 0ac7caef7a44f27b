// Package sourcetest helps tests of reclaim sources.
package sourcetest

import (
	"context"

	"github.com/jobguard/jobguard/reclaim"
)

// All collects every page of src, pageSize jobs at a time: a small size
// makes a test page through even a short listing.
func All(ctx context.Context, src reclaim.Source, pageSize int) ([]reclaim.ActiveJob, error) {
	var all []reclaim.ActiveJob
	err := src.Active(ctx, reclaim.Query{PageSize: pageSize}, func(page []reclaim.ActiveJob) error {
		all = append(all, page...)
		return nil
	})
	return all, err
}
