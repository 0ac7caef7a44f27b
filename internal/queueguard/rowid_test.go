package queueguard_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/queueguard"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

func TestRowID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ doc, id, err string }{
		{doc: `{"job_id":"-0"}`, id: "-0"},
		{doc: `{"job_id":"+0042"}`, id: "+0042"},
		{doc: `{"job_id":"6F9619FF-8B86-D011-B42D-00C04FC964FF"}`, id: "6F9619FF-8B86-D011-B42D-00C04FC964FF"},
		{doc: `{"job_id":-0}`, id: "0"},
		{doc: `{"job_id":1e3}`, id: "1000"},
		{doc: `{"job_id": 42 ,"weeks":2}`, id: "42"},
		{doc: `{"job_id":"first","job_id":"last"}`, id: "last"},
		{doc: ``, err: "not JSON"},
		{doc: `job_id=1`, err: "not JSON"},
		{doc: `[1]`, err: `no key "job_id"`},
		{doc: `null`, err: `no key "job_id"`},
		{doc: `{"Job_ID":"x"}`, err: `no key "job_id"`},
		{doc: `{"job_id":null}`, err: `key "job_id" is a JSON null; want a string or an integer`},
		{doc: `{"job_id":""}`, err: `key "job_id" is an empty string`},
		{doc: `{"job_id":true}`, err: `a JSON boolean`},
		{doc: `{"job_id":{"id":1}}`, err: `a JSON object`},
		{doc: `{"job_id":[1]}`, err: `a JSON array`},
		{doc: `{"job_id":1.0}`, err: `key "job_id" is 1.0; want a string or an integer`},
		{doc: `{"job_id":1` + strings.Repeat("0", 45) + `.5}`, err: `key "job_id" is 1` + strings.Repeat("0", 39) + `…; want`},
	} {
		id, err := queueguard.RowID([]byte(c.doc), "job_id")
		if c.err == "" {
			require.NoError(t, err, c.doc)
			require.Equal(t, c.id, id, c.doc)
			continue
		}
		var nr *queueguard.NoRowError
		require.ErrorAs(t, err, &nr, c.doc)
		require.ErrorContains(t, err, c.err, c.doc)
		require.ErrorIs(t, err, jobguard.ErrInvalidJobID, c.doc)
		require.True(t, jobguard.IsPermanent(err), c.doc)
	}
}

// TestRowID_ReadsANumberAsJsonbDoes holds every number against PostgreSQL:
// RowID names a row exactly when jsonb's ->> prints the number as an
// integer in int64, and names the row ->> prints.
func TestRowID_ReadsANumberAsJsonbDoes(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	for _, num := range []string{
		"0", "-0", "7", "-7", "42", "1e3", "1E3", "1e+3", "1e-0", "-1e3", "1.5e1", "1.50e1", "1.0", "-0.0",
		"10e-1", "100e-2", "0e5", "0e-1", "0.0e1", "1.5", "12.34e2", "12.345e2", "9223372036854775807",
		"9223372036854775808", "-9223372036854775808", "-9223372036854775809", "922337203685477580.7e1",
		"9.223372036854775807e18", "1e18", "1e19", "1e400", "0.000e3",
	} {
		doc := `{"job_id":` + num + `}`
		var printed string
		require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT $1::jsonb ->> 'job_id'`, doc).Scan(&printed), num)
		id, err := queueguard.RowID([]byte(doc), "job_id")
		if _, perr := strconv.ParseInt(printed, 10, 64); perr != nil {
			require.Error(t, err, "%s: jsonb prints %s", num, printed)
			continue
		}
		require.NoError(t, err, "%s: jsonb prints %s", num, printed)
		require.Equal(t, printed, id, num)
	}
}
