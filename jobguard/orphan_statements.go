package jobguard

import (
	"fmt"
	"strings"

	"github.com/jobguard/jobguard/internal/guardlink"
	"github.com/jobguard/jobguard/internal/ident"
)

// buildOrphans returns the builder of the rescue's statements (package
// jobset's Orphans), or nil when the table maps no owner or no
// generation. ids is the id array's cast, typ the type expression over
// "t.", as buildSetStatements has them.
func buildOrphans(t Table, cat catalog, ids, typ string) func(live, deadLocked func(string) (string, error)) (guardlink.OrphanStatements, error) {
	if t.OwnerColumn == "" || t.GenerationColumn == "" {
		return nil
	}
	q := ident.Quote
	tbl := t.QualifiedName()
	id, status, gen, owner := q(t.IDColumn), q(t.StatusColumn), q(t.GenerationColumn), q(t.OwnerColumn)
	processing, queued := ident.Literal(t.Statuses.Processing), ident.Literal(t.Statuses.Queued)
	idCast := strings.TrimSuffix(strings.TrimPrefix(ids, "text[]"), "[]")
	var reset string
	if t.ProgressColumn != "" {
		reset += fmt.Sprintf(", %s = 0", q(t.ProgressColumn))
	}
	if t.StartedAtColumn != "" {
		reset += fmt.Sprintf(", %s = NULL", q(t.StartedAtColumn))
	}
	return func(live, deadLocked func(string) (string, error)) (guardlink.OrphanStatements, error) {
		var s guardlink.OrphanStatements
		readLive, err := live("t." + owner)
		if err != nil {
			return s, err
		}
		// The write locks the dead lease it acts on, so that no renewal
		// under way revives it after the rescue (lease.Workers.DeadLocked).
		writeDead, err := deadLocked("l.owner")
		if err != nil {
			return s, err
		}
		// The status is a literal and the owner compared bare, so that
		// the bundled migration's partial index over the owned running
		// jobs, by id, serves the read in its order even under a generic
		// plan (TestOrphans_GenericPlanUsesThePartialIndex): it reads
		// only the jobs a process claims, and probes the workers table
		// once for each.
		s.Read = fmt.Sprintf(`SELECT t.%[1]s::text, t.%[2]s::int8, t.%[3]s::text, %[4]s FROM %[5]s AS t`+
			` WHERE t.%[6]s = %[7]s AND t.%[3]s IS NOT NULL AND NOT %[8]s`+
			` AND ($2::text IS NULL OR t.%[1]s > $2::text%[9]s) ORDER BY t.%[1]s LIMIT $1`,
			id, gen, owner, typ, tbl, status, processing, readLive, idCast)
		// Like Fail's write: the rows are locked first, skipping any that
		// another transaction holds, and each is changed only when it
		// still runs the execution that was read (status, generation,
		// owner) and its owner's lease is still not live on the
		// database's clock. It goes back to QUEUED under a new
		// generation, with no owner and no start: the job was not failed,
		// its attempt is over. The old generation comes back, for the
		// notice that cancels what the old execution still runs.
		s.Rescue = fmt.Sprintf(
			`WITH l AS (SELECT e.*, t.ctid AS tid FROM unnest($2::%[1]s, $3::int8[], $4::text[]) AS e(id, generation, owner)`+
				` JOIN %[2]s AS t ON t.%[3]s = e.id FOR NO KEY UPDATE OF t SKIP LOCKED),`+
				` u AS (UPDATE %[2]s AS t SET %[4]s = %[5]s, %[6]s = t.%[6]s + 1, %[7]s = NULL, %[8]s = %[9]s, %[10]s = %[11]s%[12]s FROM l`+
				` WHERE t.ctid = l.tid AND t.%[3]s = l.id AND t.%[4]s = %[13]s AND t.%[6]s = l.generation`+
				` AND t.%[7]s = l.owner AND %[14]s RETURNING t.%[3]s AS id, l.generation, %[15]s AS type)`+
				` SELECT u.id::text, u.generation, u.type FROM u UNION ALL SELECT NULL, count(*), '' FROM l`,
			ids, tbl, id, status, queued, gen, owner, q(t.FailureReasonColumn), cat.columns[t.FailureReasonColumn].fitted("$1"),
			q(t.UpdatedAtColumn), nowExpr(cat.columns[t.UpdatedAtColumn]), reset, processing, writeDead, typ)
		return s, nil
	}
}
