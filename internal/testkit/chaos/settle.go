package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/testkit/history"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// MeterVideo is the meter a video job bills.
const MeterVideo = "video_ms"

// updateArgs are the arguments a video's metadata updates store in its
// finalize record.
type updateArgs struct {
	Video string `json:"video"`
	// Fail is the update's fault: "" none, "transient" (the store refuses
	// the worker's write, then comes back for the sweep's) or "permanent"
	// (it refuses every write, in every process).
	Fail string `json:"fail,omitempty"`
	// Slow holds the worker's run of the update this long.
	Slow time.Duration `json:"slow,omitempty"`
}

// The faults of an update.
const (
	faultTransient = "transient"
	faultPermanent = "permanent"
)

// NewSettler builds the run's settler over pool, with the two metadata
// updates of a video ("asset", "content") and its increment, which records
// its billing in the history with rec, in the billing's transaction.
// inWorker says whose process it is: a transient fault fails the worker's
// run of an update and spares the sweep's, as a store that was down for a
// moment.
func NewSettler(ctx context.Context, guard *jobguard.Guard, pool *pgxpool.Pool, t Timing, inWorker bool, rec *Recorder, log *slog.Logger) (*settle.Settler, error) {
	update := func(sql string) settle.Handler {
		return func(ctx context.Context, exec jobguard.Execution, raw json.RawMessage) error {
			var a updateArgs
			if err := json.Unmarshal(raw, &a); err != nil {
				return err
			}
			if a.Slow > 0 && inWorker {
				t := time.NewTimer(a.Slow) // a kill lands here, after the completion
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
			}
			if a.Fail == faultPermanent || (a.Fail == faultTransient && inWorker) {
				return fmt.Errorf("metadata store refused the write (%s)", a.Fail)
			}
			tag, err := pool.Exec(ctx, sql, a.Video)
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("video %s: %d rows", a.Video, tag.RowsAffected())
			}
			return err
		}
	}
	return settle.New(ctx, settle.Config{
		Guard: guard, DB: pool, Logger: log,
		Handlers: map[string]settle.Handler{
			// Both set, never add: a re-run changes nothing.
			"asset": update(`UPDATE videos SET asset_ok = true WHERE id = $1`),
			"content": update(`INSERT INTO contents (video_id, published) VALUES ($1, true)
				ON CONFLICT (video_id) DO UPDATE SET published = true`),
		},
		Increments: map[string]settle.Increment{
			MeterVideo: func(ctx context.Context, tx pgx.Tx, exec jobguard.Execution, e usage.Entry) error {
				tag, err := tx.Exec(ctx, `UPDATE accounts SET video_ms = video_ms + $2 WHERE id = $1`, e.Account, e.Quantity)
				if err == nil && tag.RowsAffected() != 1 {
					err = fmt.Errorf("account %s: %d rows", e.Account, tag.RowsAffected())
				}
				if err != nil {
					return err
				}
				return rec.OK(ctx, tx, 0, history.OpBill, exec.JobID, exec.Generation, e.Meter)
			},
		},
		Grace:         t.SettleGrace,
		UpdateTimeout: 5 * time.Second,
		MaxAttempts:   t.SettleAttempts,
		BackoffMin:    t.SettleBackoff,
		BackoffMax:    8 * t.SettleBackoff,
		Concurrency:   2,
	})
}

// videoSpec is the settle spec of a video's finalize under plan p.
func videoSpec(parent string, p Plan) settle.Spec {
	args := func(name string) updateArgs {
		a := updateArgs{Video: parent}
		if name == "asset" {
			a.Slow = p.SlowUpdate
		}
		if p.FailUpdate == name {
			a.Fail = faultTransient
			if p.FailForGood {
				a.Fail = faultPermanent
			}
		}
		return a
	}
	spec := settle.Spec{Usage: []usage.Entry{{Account: p.Account, Meter: MeterVideo, Quantity: p.Quantity}}}
	if !p.NoUpdates {
		spec.Updates = []settle.Update{{Name: "asset", Args: args("asset")}, {Name: "content", Args: args("content")}}
	}
	return spec
}
