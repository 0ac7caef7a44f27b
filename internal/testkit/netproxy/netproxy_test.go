package netproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/netproxy"
)

// echo serves a line echo on loopback and returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, p *netproxy.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends a line and reads it back within wait.
func roundTrip(c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, error) {
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	got, err := r.ReadString('\n')
	return got, err
}

func TestProxy_Forwards(t *testing.T) {
	t.Parallel()
	p := netproxy.New(t, echo(t))
	c, r := dial(t, p)
	got, err := roundTrip(c, r, "hello", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "hello\n", got)
}

func TestProxy_FreezeHoldsBytesAndKeepsTheConnectionOpen(t *testing.T) {
	t.Parallel()
	p := netproxy.New(t, echo(t))
	c, r := dial(t, p)
	_, err := roundTrip(c, r, "before", 5*time.Second)
	require.NoError(t, err)

	p.Freeze()
	_, err = roundTrip(c, r, "held", 300*time.Millisecond)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "no reply, and no EOF or reset either")
	late, lateR := dial(t, p) // accepted while frozen, not forwarded
	_, err = roundTrip(late, lateR, "late", 300*time.Millisecond)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)

	p.Thaw()
	got, err := roundTrip(c, r, "after", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "held\n", got, "what was sent while frozen is delivered, not dropped")
	got, err = roundTrip(late, lateR, "again", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "late\n", got)
}

func TestProxy_ResetCutsEveryConnection(t *testing.T) {
	t.Parallel()
	p := netproxy.New(t, echo(t))
	c, r := dial(t, p)
	_, err := roundTrip(c, r, "before", 5*time.Second)
	require.NoError(t, err)
	p.Freeze()

	p.Reset()
	_, err = roundTrip(c, r, "after", 5*time.Second)
	require.Error(t, err)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the connection ends at once: %v", err)

	p.Thaw()
	c, r = dial(t, p)
	got, err := roundTrip(c, r, "new", 5*time.Second)
	require.NoError(t, err, "later connections are forwarded")
	require.Equal(t, "new\n", got)
}
