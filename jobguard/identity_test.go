package jobguard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// TestIdentity_EveryEntryPointNamesTheJobByItsCanonicalID feeds every entry
// point of the guard, the start guard and the marker store each spelling of
// a job's id, and asserts that each one acts on the job's one row and
// names it, in every Execution and error it returns and every marker key it
// writes or reads, by its canonical id.
func TestIdentity_EveryEntryPointNamesTheJobByItsCanonicalID(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		env, g := jobs.Env, jobs.Guard
		st := jobs.Table.Statuses
		sg := newStartGuard(t, jobs, jobguard.StartGuardConfig{})
		markers := sg.Markers()
		for _, sp := range jobs.Spellings(jobs.Insert(t, fixture.Job{})) {
			t.Run(sp.Name, func(t *testing.T) {
				id := jobs.Insert(t, fixture.Job{Status: st.Queued})
				s := respell(t, jobs, id, sp.Name)
				canonOf := func(id, s string) (func(string, string), func(string, error)) {
					canon := func(what string, got string) {
						t.Helper()
						require.Equal(t, id, got, "%s names job %s (given as %q) by another id", what, id, s)
					}
					return canon, func(what string, err error) {
						t.Helper()
						var se *jobguard.StateError
						require.ErrorAs(t, err, &se, what)
						canon(what+": StateError.JobID", se.JobID)
					}
				}
				canon, stateID := canonOf(id, s)

				require.NoError(t, sg.Check(ctx, env.Pool, s), "Check")
				exec, err := sg.Start(ctx, env.Pool, s)
				require.NoError(t, err, "Start")
				canon("Start", exec.JobID)
				spelled := jobguard.Execution{JobID: s, Generation: exec.Generation}

				require.NoError(t, g.Touch(ctx, env.Pool, spelled), "Touch")
				require.NoError(t, g.TouchProgress(ctx, env.Pool, spelled, 50), "TouchProgress")
				require.NoError(t, g.Fail(ctx, env.Pool, spelled, "boom"), "Fail")
				require.Equal(t, st.Failed, jobs.Read(t, id).Status)
				stateID("Fail of a failed job", g.Fail(ctx, env.Pool, spelled, "again"))
				stateID("CompleteIfActive of a failed job", g.CompleteIfActive(ctx, env.Pool, spelled))
				stateID("CompleteIfProcessing of a failed job", g.CompleteIfProcessing(ctx, env.Pool, spelled))
				stateID("Touch of a failed job", g.Touch(ctx, env.Pool, spelled))

				gen, err := g.Retry(ctx, env.Pool, s)
				require.NoError(t, err, "Retry")
				_, err = g.Retry(ctx, env.Pool, s)
				stateID("Retry of a queued job", err)
				exec, err = sg.Start(ctx, env.Pool, s)
				require.NoError(t, err, "Start after Retry")
				require.Equal(t, gen+boolInt(g.Fenced()), exec.Generation)
				spelled = jobguard.Execution{JobID: s, Generation: exec.Generation}

				fin, err := g.Finalize(ctx, env.Pool, spelled, jobguard.FinalizeSpec{})
				require.NoError(t, err, "Finalize")
				require.True(t, fin.Confirmed())
				canon("Finalize's Finalized.Execution", fin.Execution().JobID)
				require.Equal(t, st.Completed, jobs.Read(t, id).Status)
				fin, err = g.Finalize(ctx, env.Pool, spelled, jobguard.FinalizeSpec{})
				require.ErrorIs(t, err, jobguard.ErrJobTerminal)
				require.True(t, fin.Rejected())
				canon("a rejected Finalize's Finalized.Execution", fin.Execution().JobID)
				stateID("a rejected Finalize", err)

				fin, err = g.Resume(ctx, env.Pool, spelled, jobguard.FinalizeSpec{})
				require.NoError(t, err, "Resume")
				require.True(t, fin.Confirmed())
				canon("Resume's Finalized.Execution", fin.Execution().JobID)
				fin, err = g.Resume(ctx, env.Pool, jobguard.Execution{JobID: s, Generation: exec.Generation + 1}, jobguard.FinalizeSpec{})
				if g.Fenced() {
					stateID("a rejected Resume", err)
					canon("a rejected Resume's Finalized.Execution", fin.Execution().JobID)
				}

				// CompleteTx, and a marker written, read and deleted
				// through the spelling.
				id2 := jobs.Insert(t, fixture.Job{Status: st.Queued})
				s2 := respell(t, jobs, id2, sp.Name)
				canon, stateID = canonOf(id2, s2)
				exec2, err := sg.Start(ctx, env.Pool, s2)
				require.NoError(t, err)
				spelled2 := jobguard.Execution{JobID: s2, Generation: exec2.Generation}
				require.NoError(t, g.CompleteTx(ctx, env.Pool, spelled2, func(pgx.Tx) error { return nil }), "CompleteTx")
				require.Equal(t, st.Completed, jobs.Read(t, id2).Status)
				stateID("a refused CompleteTx", g.CompleteTx(ctx, env.Pool, spelled2, func(pgx.Tx) error { return nil }))

				require.Equal(t, markers.Key(id2), markers.Key(s2), "Key")
				require.NoError(t, markers.Write(ctx, marker.Marker{JobID: s2, Generation: exec2.Generation, Reason: jobguard.ReclaimedReasonDefault}))
				m, found, err := markers.Read(ctx, id2)
				require.NoError(t, err)
				require.True(t, found, "a marker written as %q is read as %q", s2, id2)
				canon("Marker.JobID", m.JobID)
				m, found, err = markers.Read(ctx, s2)
				require.NoError(t, err)
				require.True(t, found)
				canon("Marker.JobID read through the spelling", m.JobID)
				err = sg.Check(ctx, env.Pool, s2)
				var re *jobguard.ReclaimedError
				require.ErrorAs(t, err, &re)
				canon("ReclaimedError.JobID", re.JobID)
				keys, err := env.Redis.Keys(ctx, env.Prefix+":*").Result()
				require.NoError(t, err)
				require.Len(t, keys, 1, "one marker key: %q", keys)
				require.Contains(t, keys[0], "{"+id2+"}")
				require.NoError(t, markers.Delete(ctx, s2))
				_, found, err = markers.Read(ctx, id2)
				require.NoError(t, err)
				require.False(t, found, "Delete through the spelling removes the marker")
			})
		}
	})
}

// respell returns id spelled as the spelling of that name, checking that
// the spelling really differs where the column admits another.
func respell(t *testing.T, jobs *fixture.Jobs, id, name string) string {
	t.Helper()
	for _, sp := range jobs.Spellings(id) {
		if sp.Name == name {
			return sp.ID
		}
	}
	t.Fatalf("no spelling %q of %s", name, id)
	return ""
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// TestCanonicalID_AgreesWithTheIDColumn checks every spelling of an id
// against the server's own reading of it: where the column accepts the
// spelling, CanonicalID gives what the column prints; a spelling it takes
// that this server refuses is one of newer servers (PostgreSQL 16's
// integers) or a URN, which no version reads.
func TestCanonicalID_AgreesWithTheIDColumn(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		col := fmt.Sprintf(`SELECT pg_typeof(%s)::text FROM %s LIMIT 1`, quote(jobs.Table.IDColumn), jobs.Table.QualifiedName())
		id := jobs.Insert(t, fixture.Job{})
		var typ string
		require.NoError(t, jobs.Env.Pool.QueryRow(ctx, col).Scan(&typ))
		for _, sp := range jobs.Spellings(id) {
			got, err := jobs.Guard.CanonicalID(sp.ID)
			require.NoError(t, err, "%s %q", sp.Name, sp.ID)
			require.Equal(t, id, got, "%s %q", sp.Name, sp.ID)
			var server string
			err = jobs.Env.Pool.QueryRow(ctx, `SELECT $1::text::`+typ+`::text`, sp.ID).Scan(&server)
			if err != nil {
				require.True(t, sp.Newer || strings.HasPrefix(strings.ToLower(sp.ID), "urn:"),
					"%s %q: the server refuses it (%v)", sp.Name, sp.ID, err)
				continue
			}
			require.Equal(t, server, got, "%s %q", sp.Name, sp.ID)
		}
	})
}

// TestCanonicalID_RefusesWhatNamesNoRow is the other side: what is no
// value of the column is refused with ErrInvalidJobID, before any SQL, by
// every entry point alike.
func TestCanonicalID_RefusesWhatNamesNoRow(t *testing.T) {
	t.Parallel()
	bad := map[fixture.IDType][]string{
		fixture.IDUUID: {"", " ", "not-a-uuid", "7c9e6679-7425-40de-944b-e07fc1f90ae", "7c9e6679-7425-40de-944b-e07fc1f90ae77",
			"{7c9e6679-7425-40de-944b-e07fc1f90ae7", "7c9e6679-7425-40de-944b-e07fc1f90ae7}", " 7c9e6679-7425-40de-944b-e07fc1f90ae7",
			"7c9e6679--7425-40de-944b-e07fc1f90ae7", "7c9e6-679-7425-40de-944b-e07fc1f90ae7", "-7c9e6679742540de944be07fc1f90ae7",
			"7c9e6679742540de944be07fc1f90ae7-", "urn:uuid:", "urn:uuid:{7c9e6679-7425-40de-944b-e07fc1f90ae7}x", "g c9e6679-7425-40de-944b-e07fc1f90ae7"},
		fixture.IDInt: {"", " ", "+", "-", "4 2", "+-42", "--42", "+ 42", "42a", "0x", "0x_", "0xg", "_42", "42_", "4__2", "0b2", "0o8",
			"9223372036854775808", "-9223372036854775809", "0x8000000000000000", "1e3", "42.0", "\u00a042", "٤٢"},
		fixture.IDText: {"", "a\x00b"},
	}
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		sg := newStartGuard(t, jobs, jobguard.StartGuardConfig{})
		for _, s := range bad[jobs.IDType] {
			_, err := jobs.Guard.CanonicalID(s)
			require.ErrorIs(t, err, jobguard.ErrInvalidJobID, "CanonicalID(%q)", s)
			_, err = sg.Start(ctx, jobs.Env.Pool, s)
			require.ErrorIs(t, err, jobguard.ErrInvalidJobID, "Start(%q)", s)
			_, err = jobs.Guard.Finalize(ctx, jobs.Env.Pool, jobguard.Execution{JobID: s}, jobguard.FinalizeSpec{
				Recheck: func(context.Context) error { return errors.New("Finalize of an invalid id ran its re-check") },
			})
			require.ErrorIs(t, err, jobguard.ErrInvalidJobID, "Finalize(%q)", s)
			_, _, err = sg.Markers().Read(ctx, s)
			require.ErrorIs(t, err, jobguard.ErrInvalidJobID, "Markers().Read(%q)", s)
		}
	})
}

// TestStartGuard_MarkerOfAnotherJobsTableRefusesNothing runs two jobs
// tables with integer ids under the same shared settings: task 42's
// reclaim marker must neither refuse export 42's start nor be overwritten
// by export 42's.
func TestStartGuard_MarkerOfAnotherJobsTableRefusesNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	starts := map[string]*jobguard.StartGuard{}
	for _, name := range []string{"tasks", "exports"} {
		env.Exec(sqlf(`CREATE TABLE %s (
		    id bigint PRIMARY KEY,
		    status text NOT NULL,
		    generation bigint NOT NULL DEFAULT 0,
		    failure_reason text,
		    updated_at timestamptz NOT NULL DEFAULT now())`, name))
		env.Exec(sqlf(`INSERT INTO %s (id, status) VALUES (42, 'QUEUED')`, name))
		g, err := jobguard.NewWithConfig(ctx, env.Pool, jobguard.Table{Name: name, GenerationColumn: "generation"},
			jobguard.GuardConfig{Shared: jobguard.Shared{Prefix: env.Prefix, Markers: jobguard.MarkersRedis}})
		require.NoError(t, err)
		sg, err := jobguard.NewStartGuard(g, env.Redis, jobguard.StartGuardConfig{})
		require.NoError(t, err)
		starts[name] = sg
	}
	require.NoError(t, starts["tasks"].Markers().Write(ctx,
		marker.Marker{JobID: "42", Generation: 5, Reason: jobguard.ReclaimedReasonDefault}))
	require.NotEqual(t, starts["tasks"].Markers().Key("42"), starts["exports"].Markers().Key("42"))
	_, found, err := starts["exports"].Markers().Read(ctx, "42")
	require.NoError(t, err)
	require.False(t, found, "task 42's marker is no marker of export 42")
	exec, err := starts["exports"].Start(ctx, env.Pool, "42")
	require.NoError(t, err, "export 42 starts")
	require.NoError(t, starts["exports"].Markers().Write(ctx,
		marker.Marker{JobID: "42", Generation: exec.Generation, Reason: jobguard.ReclaimedReasonDefault}))
	m, found, err := starts["tasks"].Markers().Read(ctx, "42")
	require.NoError(t, err)
	require.True(t, found)
	require.EqualValues(t, 5, m.Generation, "task 42's marker is its own")
	require.ErrorIs(t, starts["tasks"].Check(ctx, env.Pool, "42"), jobguard.ErrReclaimed)
}

// TestCanonicalID_CharColumnIgnoresTrailingSpaces: a char(n) column pads
// its values and compares them without their trailing spaces, so "abc"
// and "abc  " are one row, and one job.
func TestCanonicalID_CharColumnIgnoresTrailingSpaces(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	env.Exec(`CREATE TABLE padded (
	    id char(12) PRIMARY KEY,
	    status text NOT NULL,
	    generation bigint NOT NULL DEFAULT 0,
	    failure_reason text,
	    updated_at timestamptz NOT NULL DEFAULT now())`)
	env.Exec(`INSERT INTO padded (id, status) VALUES ('abc', 'QUEUED'), (' x', 'QUEUED')`)
	g, err := jobguard.NewWithConfig(ctx, env.Pool, jobguard.Table{Name: "padded", GenerationColumn: "generation"},
		jobguard.GuardConfig{Shared: jobguard.Shared{Prefix: env.Prefix, Markers: jobguard.MarkersRedis}})
	require.NoError(t, err)
	for in, want := range map[string]string{"abc": "abc", "abc ": "abc", "abc         ": "abc", " x": " x", " x  ": " x"} {
		got, err := g.CanonicalID(in)
		require.NoError(t, err, "%q", in)
		require.Equal(t, want, got, "%q", in)
		var server string
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT $1::text::char(12)::text`, in).Scan(&server))
		require.Equal(t, server, got, "%q: the column's own reading", in)
	}
	_, err = g.CanonicalID("   ")
	require.ErrorIs(t, err, jobguard.ErrInvalidJobID, "blank is the empty id")
	sg, err := jobguard.NewStartGuard(g, env.Redis, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	exec, err := sg.Start(ctx, env.Pool, "abc  ")
	require.NoError(t, err)
	require.Equal(t, "abc", exec.JobID)
	rows, err := jobset.New(g).Snapshot(ctx, env.Pool, []string{"abc  "})
	require.NoError(t, err)
	require.Equal(t, "abc", rows["abc  "].ID)
	fin, err := g.Finalize(ctx, env.Pool, jobguard.Execution{JobID: "abc     ", Generation: exec.Generation}, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	require.Equal(t, "abc", fin.Execution().JobID)
}

// TestNew_RefusesAnIDColumnWithANondeterministicCollation: under a
// case-insensitive collation two spellings of a text id are one row, and
// nothing outside the database could tell which keys are one job.
func TestNew_RefusesAnIDColumnWithANondeterministicCollation(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	env.Exec(`CREATE COLLATION nocase (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`)
	env.Exec(`CREATE TABLE folded (
	    id text COLLATE nocase PRIMARY KEY,
	    status text NOT NULL,
	    failure_reason text,
	    updated_at timestamptz NOT NULL DEFAULT now())`)
	_, err := jobguard.New(context.Background(), env.Pool, jobguard.Table{Name: "folded"})
	require.ErrorContains(t, err, "nondeterministic collation")
	require.ErrorContains(t, err, "IDColumn")
}

// FuzzCanonicalID_AgreesWithTheServer gives arbitrary strings to the
// guards of an id column of every type the guard takes and to the server's
// own input function for that type: whatever the server reads, CanonicalID
// reads as the same value; whatever the server refuses, CanonicalID
// refuses too, except the spellings it reads on every server and
// PostgreSQL reads only from version 16 on (radix prefixes, underscores)
// or never (a uuid's URN form).
func FuzzCanonicalID_AgreesWithTheServer(f *testing.F) {
	for _, s := range []string{"42", "+0042", " 42\n", "0x2A", "4_2", "-0", "9223372036854775808", "32768",
		"7c9e6679-7425-40de-944b-e07fc1f90ae7", "{7C9E6679742540DE944BE07FC1F90AE7}", "7c9e-6679-7425-40de-944b-e07f-c1f9-0ae7",
		"urn:uuid:7c9e6679-7425-40de-944b-e07fc1f90ae7", "abc  ", " ", "", "a\x00b", "\xff", "Export/A"} {
		f.Add(s)
	}
	env := testenv.New(f, testenv.Config{MaxConns: 2})
	ctx := context.Background()
	guards := map[string]*jobguard.Guard{}
	for _, typ := range []string{"uuid", "int8", "int4", "int2", "text", "varchar", "bpchar"} {
		name := "ids_" + typ
		env.Exec(sqlf(`CREATE TABLE %s (id %s PRIMARY KEY, status text NOT NULL, failure_reason text,
		    updated_at timestamptz NOT NULL DEFAULT now())`, name, typ))
		g, err := jobguard.New(ctx, env.Pool, jobguard.Table{Name: name})
		if err != nil {
			f.Fatal(err)
		}
		guards[typ] = g
	}
	f.Fuzz(func(t *testing.T, s string) {
		for typ, g := range guards {
			got, err := g.CanonicalID(s)
			var server string
			serr := env.Pool.QueryRow(ctx, `SELECT $1::text::`+typ+`::text`, s).Scan(&server)
			switch {
			case serr == nil && server == "":
				// The empty id (a blank char(n) value included) is
				// refused on purpose: it names no job.
				if err == nil {
					t.Fatalf("%s: CanonicalID(%q) = %q; want the empty id refused", typ, s, got)
				}
			case serr == nil && err != nil:
				t.Fatalf("%s: the server reads %q as %q; CanonicalID refuses it: %v", typ, s, server, err)
			case serr == nil && got != server:
				t.Fatalf("%s: the server reads %q as %q; CanonicalID as %q", typ, s, server, got)
			case serr != nil && err == nil:
				lower := strings.ToLower(s)
				newer := strings.HasPrefix(typ, "int") && strings.ContainsAny(lower, "xob_")
				urn := typ == "uuid" && strings.HasPrefix(lower, "urn:uuid:")
				if !newer && !urn {
					t.Fatalf("%s: the server refuses %q (%v); CanonicalID reads it as %q", typ, s, serr, got)
				}
			case err != nil && !errors.Is(err, jobguard.ErrInvalidJobID):
				t.Fatalf("%s: CanonicalID(%q) = %v; want ErrInvalidJobID", typ, s, err)
			}
		}
	})
}

// TestTableKey_IsTheCatalogsNameHoweverTheTableIsSpelled: a table reached
// through the search_path and the same table named with its schema have
// one key, the catalog's schema and name, quoted; another table has
// another.
func TestTableKey_IsTheCatalogsNameHoweverTheTableIsSpelled(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	jobs := fixture.Create(t, env, fixture.Default)
	prisma := fixture.Create(t, env, fixture.Prisma)
	qualified, err := jobguard.New(ctx, env.Pool, jobguard.Table{Schema: env.Schema, Name: "jobs"})
	require.NoError(t, err)
	require.Equal(t, `"`+env.Schema+`"."jobs"`, jobs.Guard.TableKey())
	require.Equal(t, jobs.Guard.TableKey(), qualified.TableKey())
	require.Equal(t, `"`+env.Schema+`"."CourseJob"`, prisma.Guard.TableKey())
	fin, err := jobs.Guard.Resume(ctx, env.Pool, jobguard.Execution{JobID: jobs.Insert(t, fixture.Job{Status: "COMPLETED"})}, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	require.Equal(t, jobs.Guard.TableKey(), fin.TableKey())
	require.Empty(t, jobguard.Finalized{}.TableKey())
}
