// Package rediscluster starts a real Redis Cluster for tests: three masters
// and no replicas, each a private redis-server on loopback ports of its own,
// joined by redis-cli --cluster create. The library claims to work on a
// Cluster (hash-tagged keys, redis.UniversalClient accepted everywhere); only
// a real one shows that its scripts, pipelines and subscriptions hold when
// keys live on different nodes.
//
// A Cluster belongs to the test that started it and is stopped, its nodes'
// processes waited for and their files removed, when that test ends. Start
// one in a parent test and run the tests that share it as its parallel
// subtests, each under a key prefix of its own (KeyPrefix): starting a
// cluster costs about two seconds, most of it redis-cli waiting for the
// nodes to meet.
//
// A test is skipped, saying why, only when redis-server or redis-cli is not
// installed; any other failure to start fails it.
package rediscluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Masters is how many masters a Cluster has: the fewest redis-cli accepts,
// and enough that keys of different jobs land on different nodes.
const Masters = 3

// startTimeout bounds the start of a whole cluster, retries included.
const startTimeout = 30 * time.Second

// Cluster is a running Redis Cluster.
type Cluster struct {
	// Addrs are the masters' host:port addresses, in the order redis-cli
	// was given them: it assigns the lowest slots to the first.
	Addrs []string

	nodes []*node
}

// node is one redis-server process.
type node struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been waited for
	err  error         // what Wait returned; read after done
}

// Start starts a cluster and stops it when t ends. It skips t when
// redis-server or redis-cli is not installed.
func Start(t testing.TB) *Cluster {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("rediscluster: redis-server is not installed; the Redis Cluster tests need it (Debian: redis-server)")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("rediscluster: redis-cli is not installed; the Redis Cluster tests need it to create the cluster (Debian: redis-tools)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	// Free ports are found by binding and releasing them, so another process
	// may take one before a node does: such a start is tried again on fresh
	// ports.
	var errs []error
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		c := &Cluster{}
		t.Cleanup(c.stop) // registered before the nodes start, so none is left running
		err := c.start(ctx, server, cli, t.TempDir())
		if err == nil {
			return c
		}
		errs = append(errs, err)
		c.stop()
	}
	t.Fatalf("rediscluster: start: %v", errors.Join(errs...))
	return nil
}

// start starts the nodes in dir, joins them and waits until every node
// serves every slot.
func (c *Cluster) start(ctx context.Context, server, cli, dir string) error {
	ports, err := freePorts(2 * Masters)
	if err != nil {
		return err
	}
	for i := range Masters {
		n, err := startNode(server, filepath.Join(dir, "node"+strconv.Itoa(i)), ports[i], ports[Masters+i])
		if err != nil {
			return err
		}
		c.nodes = append(c.nodes, n)
		c.Addrs = append(c.Addrs, n.addr)
	}
	for _, n := range c.nodes {
		if err := n.waitPing(ctx); err != nil {
			return err
		}
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	for _, n := range c.nodes {
		if err := n.waitClusterOK(ctx); err != nil {
			return err
		}
	}
	return nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// The listeners are all held until the end, so no port is returned twice.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startNode starts a cluster-enabled redis-server on port, with its cluster
// bus on busPort (instead of port+10000, which may be taken or out of
// range), keeping nothing on disk but its cluster config file in dir.
func startNode(server, dir string, port, busPort int) (*node, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	n := &node{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, done: make(chan struct{})}
	n.cmd = exec.Command(server,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(busPort),
		"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--dir", dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"))
	n.cmd.SysProcAttr = procAttr()
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("redis-server on %s: %w", n.addr, err)
	}
	go func() {
		n.err = n.cmd.Wait()
		close(n.done)
	}()
	return n, nil
}

// client is a plain client of the node alone, for the harness's own checks.
func (n *node) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
}

// waitPing waits until the node answers PING, or fails at once when its
// process has exited (a port taken after all).
func (n *node) waitPing(ctx context.Context) error {
	rdb := n.client()
	defer rdb.Close()
	return n.poll(ctx, "answer PING", func(ctx context.Context) (bool, error) {
		return rdb.Ping(ctx).Err() == nil, nil
	})
}

// waitClusterOK waits until the node says cluster_state:ok: it knows a master
// for every slot, so a client that asks it for the slot map gets all of it.
func (n *node) waitClusterOK(ctx context.Context) error {
	rdb := n.client()
	defer rdb.Close()
	return n.poll(ctx, "report cluster_state:ok", func(ctx context.Context) (bool, error) {
		info, err := rdb.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok"), nil
	})
}

// poll calls ok every few milliseconds until it is true, the node's process
// exits or ctx ends.
func (n *node) poll(ctx context.Context, what string, ok func(context.Context) (bool, error)) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		done, err := ok(cctx)
		cancel()
		if err != nil || done {
			return err
		}
		select {
		case <-n.done:
			return fmt.Errorf("redis-server on %s exited (%v) before it would %s:\n%s", n.addr, n.err, what, n.log())
		case <-ctx.Done():
			return fmt.Errorf("redis-server on %s did not %s: %w\n%s", n.addr, what, ctx.Err(), n.log())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// log returns the end of the node's log file.
func (n *node) log() []byte {
	b, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return bytes.TrimSpace(b)
}

// stop ends every node and waits for its process: SIGTERM, then SIGKILL for
// one that has not exited within a few seconds. It is safe to call twice.
func (c *Cluster) stop() {
	for _, n := range c.nodes {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, n := range c.nodes {
		select {
		case <-n.done:
		case <-time.After(5 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.done
		}
	}
}

// Client returns a cluster client seeded with every master, closed when t
// ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// KeyPrefix returns a key prefix of t's own (no trailing colon), so that the
// tests sharing a cluster never see each other's keys.
func KeyPrefix(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "jgc:" + hex.EncodeToString(b)
}

// KeysPerMaster counts the keys matching pattern on each master, in the
// order of Addrs, reading every master directly rather than through the
// cluster client, so that it shows where the keys really are.
func (c *Cluster) KeysPerMaster(ctx context.Context, pattern string) ([]int, error) {
	counts := make([]int, len(c.nodes))
	for i, n := range c.nodes {
		rdb := n.client()
		iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			counts[i]++
		}
		err := iter.Err()
		_ = rdb.Close()
		if err != nil {
			return nil, fmt.Errorf("rediscluster: scan %s: %w", n.addr, err)
		}
	}
	return counts, nil
}

// MasterOf returns the index in Addrs of the master that serves key's slot.
func (c *Cluster) MasterOf(ctx context.Context, key string) (int, error) {
	rdb := c.nodes[0].client()
	defer rdb.Close()
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return 0, fmt.Errorf("rediscluster: slot of %s: %w", key, err)
	}
	ranges, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("rediscluster: slots: %w", err)
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			for i, a := range c.Addrs {
				if a == r.Nodes[0].Addr {
					return i, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("rediscluster: no master serves slot %d of %s", slot, key)
}

// MoveSlot moves key's slot to the master Addrs[to] the way a resharding
// does: the target imports the slot, its owner migrates it, and, with finish
// set, the owner's keys of the slot are migrated and every master is told
// the target serves it. A client that still holds the old slot map is then
// answered MOVED. Without finish the slot stays mid-migration: its owner
// serves the keys it still holds and sends a client to the target with ASK
// for any other.
func (c *Cluster) MoveSlot(ctx context.Context, key string, to int, finish bool) error {
	from, err := c.MasterOf(ctx, key)
	if err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("rediscluster: move slot of %s: %s serves it already", key, c.Addrs[to])
	}
	clients := make([]*redis.Client, len(c.nodes))
	ids := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		clients[i] = n.client()
		defer clients[i].Close()
		if ids[i], err = clients[i].Do(ctx, "CLUSTER", "MYID").Text(); err != nil {
			return fmt.Errorf("rediscluster: id of %s: %w", n.addr, err)
		}
	}
	slot, err := clients[from].ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("rediscluster: slot of %s: %w", key, err)
	}
	fail := func(step string, err error) error {
		return fmt.Errorf("rediscluster: move slot %d from %s to %s: %s: %w", slot, c.Addrs[from], c.Addrs[to], step, err)
	}
	if err := clients[to].Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[from]).Err(); err != nil {
		return fail("importing", err)
	}
	if err := clients[from].Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[to]).Err(); err != nil {
		return fail("migrating", err)
	}
	if !finish {
		return nil
	}
	if step, err := migrateKeys(ctx, clients[from], slot, c.Addrs[to]); err != nil {
		return fail(step, err)
	}
	// The target first, then the owner, as the cluster specification
	// orders it: the target must serve the slot before the owner sends
	// clients there with MOVED.
	for _, i := range append([]int{to, from}, others(from, to)...) {
		if err := clients[i].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[to]).Err(); err != nil {
			return fail("assign", err)
		}
	}
	return nil
}

// migrateKeys migrates owner's keys of slot to the node at addr, a hundred
// at a time, until the owner holds none. On error it names the step that
// failed: reading the keys, or migrating them.
func migrateKeys(ctx context.Context, owner *redis.Client, slot int64, addr string) (string, error) {
	host, port, _ := net.SplitHostPort(addr)
	for {
		keys, err := owner.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
		if err != nil {
			return "keys", err
		}
		if len(keys) == 0 {
			return "", nil
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := owner.Do(ctx, args...).Err(); err != nil {
			return "migrate", err
		}
	}
}

// others returns the masters that are neither a nor b.
func others(a, b int) []int {
	var out []int
	for i := range Masters {
		if i != a && i != b {
			out = append(out, i)
		}
	}
	return out
}
