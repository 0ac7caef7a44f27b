package marker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// FuzzRedisStore_Read reads arbitrary values where a reclaim marker
// should be: a marker is returned only when the value is one (with a
// generation that is not negative), anything else is an error wrapping
// ErrUnreadable, and nothing panics. A marker written for an arbitrary job
// id of a text id column reads back as written; an id no text column can
// hold (empty, a NUL byte) is refused with ErrInvalidJobID by every call.
func FuzzRedisStore_Read(f *testing.F) {
	for _, s := range []struct {
		id    string
		value []byte
	}{
		{"0b6f1c6e-2f5b-4d43-9a57-8f3d7c1b2a10", []byte(`{"generation":3,"reason":"reclaimed: exceeded runtime limit without progress","at":"2026-01-02T03:04:05Z"}`)},
		{"job}{x", []byte(`{"generation":-1}`)},
		{"", []byte(``)},
		{"42", []byte(`null`)},
		{"a:b", []byte(`{"generation":"3"}`)},
		{"유니코드", []byte(`{"generation":1e400}`)},
		{"x", []byte("\x00\xff{\"generation\":1}")},
		{"y", []byte(`{"generation":9223372036854775807,"at":"not a time"}`)},
		{"z", []byte(`[{"generation":1}]`)},
	} {
		f.Add(s.id, s.value)
	}
	env := testenv.New(f)
	jobs := fixture.Create(f, env, fixture.TextID)
	store, err := marker.NewRedisStore(jobs.GuardWith(f, jobguard.Shared{Prefix: env.Prefix + ":fuzz"}), env.Redis, marker.Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, jobID string, value []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if jobID == "" || strings.IndexByte(jobID, 0) >= 0 {
			_, _, err := store.Read(ctx, jobID)
			if !errors.Is(err, jobguard.ErrInvalidJobID) {
				t.Fatalf("Read(%q) = %v; want ErrInvalidJobID", jobID, err)
			}
			if err := store.Write(ctx, marker.Marker{JobID: jobID}); !errors.Is(err, jobguard.ErrInvalidJobID) {
				t.Fatalf("Write(%q) = %v; want ErrInvalidJobID", jobID, err)
			}
			return
		}
		key := store.Key(jobID)
		if err := env.Redis.Set(ctx, key, value, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		m, found, err := store.Read(ctx, jobID)
		switch {
		case err != nil:
			if found || !errors.Is(err, marker.ErrUnreadable) {
				t.Fatalf("Read(%q) = found %v, %v; want not found and ErrUnreadable", value, found, err)
			}
		case !found:
			t.Fatalf("Read(%q) found nothing where a value is stored", value)
		case m.Generation < 0 || m.JobID != jobID:
			t.Fatalf("Read(%q) = %+v", value, m)
		}

		want := marker.Marker{JobID: jobID, Generation: int64(len(value)), Reason: string(value), At: time.Unix(1700000000, 0).UTC()}
		if !utf8.Valid(value) {
			want.Reason = "" // JSON cannot carry it as written
		}
		if err := store.Write(ctx, want); err != nil {
			t.Fatal(err)
		}
		got, found, err := store.Read(ctx, jobID)
		if err != nil || !found || got.Generation != want.Generation || got.Reason != want.Reason || !got.At.Equal(want.At) {
			t.Fatalf("round trip of %+v = %+v, %v, %v", want, got, found, err)
		}
		_ = env.Redis.Del(ctx, key)
	})
}
