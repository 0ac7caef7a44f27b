package reclaim_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/rediscluster"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/reclaim"
)

// clusterBundle is one test's jobs table and a reclaimer and a start guard
// that keep their markers on a real Redis Cluster.
type clusterBundle struct {
	cluster *rediscluster.Cluster
	rdb     *redis.ClusterClient
	jobs    *fixture.Jobs
	sg      *jobguard.StartGuard
}

func clusterSetup(t *testing.T, c *rediscluster.Cluster) *clusterBundle {
	t.Helper()
	env := testenv.New(t)
	b := &clusterBundle{cluster: c, rdb: c.Client(t), jobs: fixture.Create(t, env, fixture.Default)}
	sg, err := jobguard.NewStartGuard(b.jobs.Guard, b.rdb, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	b.sg = sg
	return b
}

// stuck inserts n jobs at generation gen that started two hours ago and have
// not progressed since.
func (b *clusterBundle) stuck(t *testing.T, n int, gen int64) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = b.jobs.Insert(t, fixture.Job{Generation: gen, UpdatedAgo: 2 * time.Hour})
	}
	return ids
}

// sweep runs one sweep over ids, listed by the queue as started two hours
// ago, with the markers on the cluster.
func (b *clusterBundle) sweep(t *testing.T, ids []string) reclaim.Report {
	t.Helper()
	src := make(listSource, len(ids))
	for i, id := range ids {
		src[i] = reclaim.ActiveJob{ID: id, Type: "chapter", StartedAt: time.Now().Add(-2 * time.Hour)}
	}
	// Every job of the test stalled at once, which the brake holds back:
	// the test is of the markers.
	r, logs := newReclaimer(t, b.jobs, reclaim.Config{Redis: b.rdb, Source: src, Brake: noBrake})
	rep, err := r.Sweep(context.Background())
	require.NoError(t, err)
	require.Zero(t, rep.MarkerErrors, logs.String())
	return rep
}

// marker reads id's marker from the cluster; it must be there.
func (b *clusterBundle) marker(t *testing.T, id string) marker.Marker {
	t.Helper()
	m, found, err := b.sg.Markers().Read(context.Background(), id)
	require.NoError(t, err)
	require.True(t, found, "job %s has no marker on the cluster", id)
	return m
}

// The reclaim markers on a real Redis Cluster, where each job's marker lives
// on the master that serves its job id's slot, so one sweep writes to every
// master.
func TestSweep_MarkersOnACluster(t *testing.T) {
	t.Parallel()
	c := rediscluster.Start(t)

	// A resharding moves markers between masters while a reclaimer's
	// client still holds the old slot map: its writes follow MOVED and ASK,
	// and an older generation still never replaces a newer one. Not
	// parallel: the slots are moved before the other tests start.
	t.Run("MarkersFollowTheirSlotToAnotherMaster", func(t *testing.T) {
		ctx := context.Background()
		b := clusterSetup(t, c)
		ids := b.stuck(t, 3, 3)
		moved, migrating, fresh := ids[0], ids[1], ids[2]
		newer := []marker.Marker{{JobID: moved, Generation: 7, At: time.Now()}, {JobID: migrating, Generation: 7, At: time.Now()}}
		require.NoError(t, b.sg.Markers().Write(ctx, newer...))
		// The client now holds the slot map from before the moves.
		owner := map[string]int{}
		for _, id := range ids {
			i, err := c.MasterOf(ctx, b.sg.Markers().Key(id))
			require.NoError(t, err)
			owner[id] = i
		}
		// moved's slot, with its marker, now belongs to another master;
		// migrating's and fresh's are on their way, their keys not yet.
		require.NoError(t, c.MoveSlot(ctx, b.sg.Markers().Key(moved), (owner[moved]+1)%rediscluster.Masters, true))
		require.NoError(t, c.MoveSlot(ctx, b.sg.Markers().Key(migrating), (owner[migrating]+1)%rediscluster.Masters, false))
		freshSlot, err := b.rdb.ClusterKeySlot(ctx, b.sg.Markers().Key(fresh)).Result()
		require.NoError(t, err)
		migratingSlot, err := b.rdb.ClusterKeySlot(ctx, b.sg.Markers().Key(migrating)).Result()
		require.NoError(t, err)
		if freshSlot != migratingSlot { // else it is on its way already
			require.NoError(t, c.MoveSlot(ctx, b.sg.Markers().Key(fresh), (owner[fresh]+1)%rediscluster.Masters, false))
		}

		require.Equal(t, len(ids), b.sweep(t, ids).Reclaimed)
		require.EqualValues(t, 7, b.marker(t, moved).Generation)
		require.EqualValues(t, 7, b.marker(t, migrating).Generation)
		require.EqualValues(t, 3, b.marker(t, fresh).Generation)
		// Where the markers really are, reading each master alone.
		for id, why := range map[string]string{moved: "migrated with its slot", fresh: "written on the importing master, sent there with ASK"} {
			counts, err := c.KeysPerMaster(ctx, b.sg.Markers().Key(id))
			require.NoError(t, err)
			require.Equal(t, 1, counts[(owner[id]+1)%rediscluster.Masters], why)
		}
	})

	// A late worker that puts the row back to work and clears the reason
	// leaves only the marker to refuse the redelivered job.
	t.Run("RedeliveredJobIsRefusedByItsMarker", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := clusterSetup(t, c)
		id := b.stuck(t, 1, 3)[0]
		rep := b.sweep(t, []string{id})
		require.Equal(t, []string{id}, rep.ReclaimedIDs)
		require.EqualValues(t, 3, b.marker(t, id).Generation)

		tb := b.jobs.Table
		b.jobs.Env.Exec(fmt.Sprintf("UPDATE %s SET %s = $2, %s = NULL WHERE %s = $1", tb.QualifiedName(),
			ident.Quote(tb.StatusColumn), ident.Quote(tb.FailureReasonColumn), ident.Quote(tb.IDColumn)), id, tb.Statuses.Processing)
		_, err := b.sg.Start(ctx, b.jobs.Env.Pool, id)
		require.ErrorIs(t, err, jobguard.ErrReclaimed)
		require.True(t, jobguard.IsPermanent(err))
		var re *jobguard.ReclaimedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, "marker", re.Source, "the database no longer says so; the marker on the cluster does")
		require.ErrorIs(t, b.sg.Check(ctx, b.jobs.Env.Pool, id), jobguard.ErrReclaimed)
	})

	t.Run("EveryJobOfALargeSweepGetsItsMarkerOnItsMaster", func(t *testing.T) {
		t.Parallel()
		b := clusterSetup(t, c)
		const n = 300
		ids := b.stuck(t, n, 2)
		rep := b.sweep(t, ids)
		require.Equal(t, n, rep.Reclaimed)
		for _, id := range ids {
			require.EqualValues(t, 2, b.marker(t, id).Generation)
		}
		counts, err := c.KeysPerMaster(context.Background(), b.jobs.Env.Prefix+":reclaimed:*")
		require.NoError(t, err)
		total := 0
		for i, k := range counts {
			require.NotZero(t, k, "master %s got none of %d markers", c.Addrs[i], n)
			total += k
		}
		require.Equal(t, n, total)
	})

	// Another reclaimer's marker of a later generation was written first:
	// this sweep's marker of the older one must not replace it, on whichever
	// master it lives.
	t.Run("AMarkerWrittenOutOfOrderKeepsTheNewerGeneration", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := clusterSetup(t, c)
		ids := b.stuck(t, 60, 4)
		var newer []marker.Marker
		for _, id := range ids[:30] {
			newer = append(newer, marker.Marker{JobID: id, Generation: 9, Reason: "newer", At: time.Now()})
		}
		require.NoError(t, b.sg.Markers().Write(ctx, newer...))

		require.Equal(t, len(ids), b.sweep(t, ids).Reclaimed)
		for _, id := range ids[:30] {
			m := b.marker(t, id)
			require.EqualValues(t, 9, m.Generation, "job %s", id)
			require.Equal(t, "newer", m.Reason)
		}
		for _, id := range ids[30:] {
			require.EqualValues(t, 4, b.marker(t, id).Generation, "job %s", id)
		}
	})

	// A master restarted or flushed no longer knows the script by its hash:
	// the markers still go out, sent whole. Not parallel: it runs alone
	// before the others, so what each master knows of the script is this
	// test's doing.
	t.Run("MarkersAreWrittenAfterEveryMasterForgotTheScript", func(t *testing.T) {
		ctx := context.Background()
		b := clusterSetup(t, c)
		// wholeCalls counts, per master, the script calls sent whole (EVAL)
		// since the last reset of its statistics.
		wholeCalls := func() []int {
			var out []int
			for _, addr := range c.Addrs {
				m := redis.NewClient(&redis.Options{Addr: addr})
				info, err := m.Info(ctx, "commandstats").Result()
				_ = m.Close()
				require.NoError(t, err)
				calls := 0
				if _, rest, ok := strings.Cut(info, "cmdstat_eval:calls="); ok {
					calls, _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				}
				out = append(out, calls)
			}
			return out
		}
		// A first sweep loads the script on every master it writes to.
		b.sweep(t, b.stuck(t, 60, 1))
		require.NoError(t, b.rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if err := m.ScriptFlush(ctx).Err(); err != nil {
				return err
			}
			return m.ConfigResetStat(ctx).Err()
		}))

		ids := b.stuck(t, 60, 1)
		require.Equal(t, len(ids), b.sweep(t, ids).Reclaimed)
		for _, id := range ids {
			require.EqualValues(t, 1, b.marker(t, id).Generation)
		}
		for i, n := range wholeCalls() {
			require.NotZero(t, n, "master %s was not sent the script whole", c.Addrs[i])
		}
	})
}
