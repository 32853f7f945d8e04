package testenv

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// WaitReady polls endpoint's Maintenance Status until the server answers,
// p exits, or timeout passes. Its error reads after the server's name
// ("kite exited while starting (...)") and wraps the last request error
// of a server that never answered.
func WaitReady(ctx context.Context, endpoint string, p *Process, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A nop logger: clientv3 would log every refused dial while the server boots.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("has no client: %w", err)
	}
	defer cli.Close()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		attempt, attemptCancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Status(attempt, endpoint)
		attemptCancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("exited while starting (%v)", p.Err())
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s (last error: %w)", timeout, err)
		case <-tick.C:
		}
	}
}
