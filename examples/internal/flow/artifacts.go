package flow

import (
	"context"
	"errors"
	"io/fs"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/compensate"
)

// The kinds of artifacts the video processor records.
const (
	// KindFile is an encoded file; its Ref is the file's path.
	KindFile = "file"
	// KindAsset is an asset row; its Ref is the row's id.
	KindAsset = "asset"
)

// Compensators undo the artifacts of the examples, by kind, for
// compensate.Config.Compensators: every process that records them (the
// video workers) or sweeps them (the reclaimer service) needs them.
func Compensators() map[string]compensate.Func {
	return map[string]compensate.Func{
		KindFile:  removeFile,
		KindAsset: deleteAsset,
	}
}

// removeFile compensates an encoded file. It is idempotent: a file that is
// already gone is done.
func removeFile(_ context.Context, _ pgx.Tx, a compensate.Artifact) error {
	if err := os.Remove(a.Ref); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// deleteAsset compensates an asset row, only while the execution that wrote
// it still owns it: a newer execution's upsert of the same asset is left
// alone.
func deleteAsset(ctx context.Context, tx pgx.Tx, a compensate.Artifact) error {
	_, err := tx.Exec(ctx, `DELETE FROM assets WHERE id = $1 AND job_id = $2 AND generation = $3`,
		a.Ref, a.JobID, a.Generation)
	return err
}
