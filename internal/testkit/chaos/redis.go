package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a private redis-server process on a port of its own, so a
// run can stop and restart it without touching any other Redis. It keeps
// its data in an append-only file synced on every write, so a stop and a
// start lose nothing that was acknowledged.
type RedisServer struct {
	// Addr is host:port of the server.
	Addr string

	bin string
	dir string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartRedis finds redis-server on PATH, picks a free port and starts the
// server with its data in dir.
func StartRedis(dir string) (*RedisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("chaos: redis: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: redis: free port: %w", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	s := &RedisServer{Addr: addr, bin: bin, dir: dir}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// Start starts the server again after Stop. It waits until it answers PING.
func (s *RedisServer) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	cmd := exec.Command(s.bin,
		"--bind", "127.0.0.1", "--port", port, "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--logfile", filepath.Join(s.dir, "redis.log"))
	cmd.SysProcAttr = ProcAttr(syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: redis: start: %w", err)
	}
	s.cmd = cmd
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("chaos: redis: not answering on %s: %w\n%s", s.Addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop shuts the server down with SIGTERM (which flushes the append-only
// file) and waits for the process to exit.
func (s *RedisServer) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	cmd := s.cmd
	s.cmd = nil
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("chaos: redis: stop: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return errors.New("chaos: redis: stop: no exit within 10s; killed")
	}
}

// Running reports whether the server process is up (as far as Start and
// Stop know).
func (s *RedisServer) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Port returns the server's port.
func (s *RedisServer) Port() int {
	_, p, _ := net.SplitHostPort(s.Addr)
	n, _ := strconv.Atoi(p)
	return n
}
