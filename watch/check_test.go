package watch

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

func TestJudge(t *testing.T) {
	t.Parallel()
	statuses := jobguard.Statuses{Queued: "waiting", Processing: "running", Completed: "done", Failed: "dead"}
	fenced := rules{fenced: true, statuses: statuses, shared: jobguard.Shared{ReclaimedReason: jobguard.ReclaimedReasonDefault}}
	unfenced := fenced
	unfenced.fenced = false
	exec := jobguard.Execution{JobID: "j", Generation: 4}
	reclaimReason := jobguard.ReclaimedReasonDefault + " (type chapter, limit 10m)"
	at := func(status string, gen int64, reason string) jobset.Job {
		return jobset.Job{ID: "j", Status: status, Generation: gen, FailureReason: reason}
	}

	cases := []struct {
		name  string
		rules rules
		row   jobset.Job
		found bool
		want  verdict
	}{
		{"running at its generation", fenced, at("running", 4, ""), true, owned},
		{"its own completion", fenced, at("done", 4, ""), true, ended},
		{"its own fail", fenced, at("dead", 4, "encoder rejected the input"), true, ended},
		{"its own fail without a reason", fenced, at("dead", 4, ""), true, ended},
		{"reclaimed at its generation", fenced, at("dead", 4, reclaimReason), true, lost},
		{"restarted: running at a newer generation", fenced, at("running", 5, ""), true, lost},
		{"completed by a newer execution", fenced, at("done", 5, ""), true, lost},
		{"failed by a newer execution", fenced, at("dead", 5, "encoder rejected the input"), true, lost},
		{"retried: queued at a newer generation", fenced, at("waiting", 5, ""), true, lost},
		{"queued at its generation", fenced, at("waiting", 4, ""), true, lost},
		{"row gone", fenced, jobset.Job{}, false, lost},
		{"unfenced: running", unfenced, at("running", 0, ""), true, owned},
		{"unfenced: completed", unfenced, at("done", 0, ""), true, ended},
		{"unfenced: its own fail", unfenced, at("dead", 0, "bad input"), true, ended},
		{"unfenced: reclaimed", unfenced, at("dead", 0, reclaimReason), true, lost},
		{"unfenced: queued again", unfenced, at("waiting", 0, ""), true, lost},
		{"unfenced: row gone", unfenced, jobset.Job{}, false, lost},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := exec
			if !c.rules.fenced {
				e.Generation = 0
			}
			require.Equal(t, c.want, judge(c.rules, e, c.row, c.found))
		})
	}
}
