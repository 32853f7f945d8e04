package testenv

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Clients opens n etcd clients, each its own gRPC channel, spread over
// endpoints round-robin: client i talks to endpoints[i mod len] only, so
// a load tool's workers, each on one client, are spread evenly over the
// servers and none is moved by the client's balancer. On an error the
// clients opened so far are closed.
func Clients(endpoints []string, n int) ([]*clientv3.Client, error) {
	clis := make([]*clientv3.Client, 0, n)
	for i := range n {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{endpoints[i%len(endpoints)]},
			DialTimeout: 5 * time.Second,
			// clientv3 logs every retry at warn; the tools count errors themselves.
			Logger: zap.NewNop(),
		})
		if err != nil {
			for _, c := range clis {
				c.Close()
			}
			return nil, err
		}
		clis = append(clis, c)
	}
	return clis, nil
}
