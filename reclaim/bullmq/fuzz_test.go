package bullmq_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/testkit/sourcetest"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim/bullmq"
)

// FuzzSource_Active lists one active job whose id and hash fields are
// arbitrary. The source must not panic, must return that one job, must never
// guess a start time (a value that is not a positive whole number of
// milliseconds up to year 9999 is an error on the job, an absent one the
// zero time), and
// with RowIDField must take the row id only from a string or integer field
// of a JSON object, never from the BullMQ id.
func FuzzSource_Active(f *testing.F) {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for _, s := range []struct {
		id, processedOn, name, data string
		withData                    bool
	}{
		{"1", now, "chapter", `{"jobId":"0b6f1c6e-2f5b-4d43-9a57-8f3d7c1b2a10"}`, true},
		{"2", now + ".5", "video", `{"jobId":42}`, true},
		{"3", "", "chapter", `{}`, true},
		{"4", "-1", "", `{"jobId":""}`, true},
		{"5", "1e3", "x", `{"jobId":4.5}`, true},
		{"6", "NaN", "x", `[1,2]`, true},
		{"7", "9223372036854775807", "x", `{"jobId":null}`, true},
		{"8", "0x10", "x", "\x00\xff", true},
		{"", now, "chapter", `not json`, false},
		{"id:with:colons", " 123", "名前", `{"jobId":"a","jobId":"b"}`, true},
	} {
		f.Add(s.id, s.processedOn, s.name, s.data, s.withData)
	}
	env := testenv.New(f)
	f.Fuzz(func(t *testing.T, id, processedOn, name, data string, withData bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		prefix := env.Prefix + ":fuzz"
		cfg := bullmq.Config{Redis: env.Redis, Prefix: prefix, Queue: "q"}
		if withData {
			cfg.RowIDField = "jobId"
		}
		src, err := bullmq.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		active, key := prefix+":q:active", prefix+":q:"+id
		defer env.Redis.Del(context.Background(), active, key)
		fields := map[string]any{"name": name, "data": data}
		if processedOn != "" {
			fields["processedOn"] = processedOn
		}
		if err := env.Redis.HSet(ctx, key, fields).Err(); err != nil {
			t.Fatal(err)
		}
		if err := env.Redis.RPush(ctx, active, id).Err(); err != nil {
			t.Fatal(err)
		}

		jobs, err := sourcetest.All(ctx, src, 1000)
		if err != nil {
			t.Fatalf("Active: %v", err)
		}
		if len(jobs) != 1 {
			t.Fatalf("Active returned %d jobs, want 1: %+v", len(jobs), jobs)
		}
		j := jobs[0]
		if j.Err != nil {
			// The sweep skips a job with an error whatever else it holds.
			if errors.Is(j.Err, bullmq.ErrNoJobHash) {
				t.Fatalf("the hash exists: %v", j.Err)
			}
			return
		}
		ms, perr := strconv.ParseInt(processedOn, 10, 64)
		switch {
		case processedOn == "" && !j.StartedAt.IsZero():
			t.Fatalf("no processedOn but StartedAt %v", j.StartedAt)
		case processedOn != "" && (perr != nil || ms <= 0 || j.StartedAt.Year() > 9999):
			t.Fatalf("processedOn %q accepted as %v", processedOn, j.StartedAt)
		case processedOn != "" && j.StartedAt.UnixMilli() <= 0:
			t.Fatalf("processedOn %q read as %v", processedOn, j.StartedAt)
		}
		if j.Type != name {
			t.Fatalf("type %q, want the job's name %q", j.Type, name)
		}
		if withData && (j.ID == "" || (j.ID == id && id != "" && !containsID(data, id))) {
			t.Fatalf("row id %q from data %q (BullMQ id %q)", j.ID, data, id)
		}
		if !withData && j.ID != id {
			t.Fatalf("id %q, want the BullMQ id %q", j.ID, id)
		}
	})
}

// containsID reports whether the data could name id as its row id.
func containsID(data, id string) bool {
	return len(data) >= len(id) && (data != "" && id != "") && contains(data, id)
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
