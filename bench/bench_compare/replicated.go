package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clusterSize is the replicated scenario's number of nodes (replicas).
const clusterSize = 3

// replicated is disk's workload on a replicated topic: for a daemon that
// has replication, three nodes on this machine with the topic at
// replicas=3, publishers and readers on the leader, CPU and peak RSS summed
// over the three; for one that has not (NSQ), one node with
// --mem-queue-size=0, as disk.
func replicated(ctx context.Context, e *env) (samples []sample, err error) {
	if !hasCluster(e.bin) {
		return pubThenSub(ctx, e, 0)
	}
	ports, err := reservePorts(clusterSize)
	if err != nil {
		return nil, err
	}
	peers := make([]string, clusterSize)
	for i, p := range ports {
		peers[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	nodes := make([]*daemon, clusterSize)
	errs := make([]error, clusterSize)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() { // together: a node serves once a majority has elected a leader
			defer wg.Done()
			nodes[i], errs[i] = e.start(ctx, "--mem-queue-size=0", "--cluster-address="+peers[i],
				"--cluster-peers="+strings.Join(peers, ","), "--broadcast-address=127.0.0.1")
		}()
	}
	wg.Wait()
	defer func() {
		for i, d := range nodes {
			if d != nil {
				err = e.stop(ctx, d, "node"+strconv.Itoa(i), err)
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := retryPost(ctx, nodes[0], "/topic/create?replicas=3&topic="+benchTopic); err != nil {
		return nil, err
	}
	if err := retryPost(ctx, nodes[0], "/channel/create?topic="+benchTopic+"&channel="+benchChannel); err != nil {
		return nil, err
	}
	leader, err := findLeader(ctx, nodes)
	if err != nil {
		return nil, err
	}
	e.group = nodes
	return pubSubOn(ctx, e, leader)
}

// hasCluster reports whether bin knows --cluster-address.
func hasCluster(bin string) bool {
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	return strings.Contains(string(out), "cluster-address")
}

// retryPost POSTs path until it succeeds, while the cluster elects its
// first leader.
func retryPost(ctx context.Context, d *daemon, path string) error {
	deadline := time.Now().Add(startTimeout)
	for {
		err := d.post(ctx, path)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// findLeader is the node whose /stats says it leads the bench topic.
func findLeader(ctx context.Context, nodes []*daemon) (*daemon, error) {
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		for _, d := range nodes {
			body, err := d.get(ctx, "/stats?format=json&topic="+benchTopic)
			if err != nil {
				continue
			}
			var st struct {
				Topics []struct {
					Replication struct {
						Role string `json:"role"`
					} `json:"replication"`
				} `json:"topics"`
			}
			if json.Unmarshal(body, &st) == nil && len(st.Topics) == 1 && st.Topics[0].Replication.Role == "leader" {
				return d, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("no node leads %s within %s", benchTopic, startTimeout)
}
