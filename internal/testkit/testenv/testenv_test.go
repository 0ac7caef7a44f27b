package testenv

import (
	"context"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/endpoint"
)

// connect's errors, which fail every test when a server is wrongly set,
// hold no password of the URLs in the environment, well-formed or not.
func TestConnect_ErrorsHoldNoPassword(t *testing.T) {
	t.Parallel()
	require.NoError(t, servers())
	leaked := regexp.MustCompile(`Zq[0-9]{2}`)
	good := shared.ep
	for _, ep := range []endpoint.Endpoints{
		{DatabaseURL: "postgres://postgres:Zq01Pw@127.0.0.1:1/test", RedisURL: good.RedisURL},
		{DatabaseURL: "postgres://postgres:Zq02Pw#Zq02Px@127.0.0.1:xx/test", RedisURL: good.RedisURL},
		{DatabaseURL: good.DatabaseURL, RedisURL: "redis://:Zq03Pw@127.0.0.1:xx/0"},
		{DatabaseURL: good.DatabaseURL, RedisURL: "redis://:Zq04Pw#Zq04Px@127.0.0.1:6379/0"},
		{DatabaseURL: good.DatabaseURL, RedisURL: "redis://:Zq05Pw@127.0.0.1:1/0"},
	} {
		admin, rdb, err := connect(context.Background(), ep)
		if err == nil {
			admin.Close()
			_ = rdb.Close()
		}
		require.Error(t, err, "%+v", ep)
		require.NotRegexp(t, leaked, err.Error())
	}
}
