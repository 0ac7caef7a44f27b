package jobguard_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
)

func TestShared_ReclaimedIsAReasonThatStartsWithTheReclaimers(t *testing.T) {
	t.Parallel()
	def := jobguard.Shared{}
	require.True(t, def.Reclaimed(jobguard.ReclaimedReasonDefault), "the zero value is the default reason")
	require.True(t, def.Reclaimed(jobguard.ReclaimedReasonDefault+" (sweep 12)"))
	require.False(t, def.Reclaimed("model call failed"))
	require.False(t, def.Reclaimed(""), "no reason is no reclaim")
	own := jobguard.Shared{ReclaimedReason: "reaped"}
	require.True(t, own.Reclaimed("reaped: 2h"))
	require.False(t, own.Reclaimed(jobguard.ReclaimedReasonDefault))
}
