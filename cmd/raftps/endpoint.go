package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/raftstore/client"
)

// endpointStatus is one row of `endpoint status`; Error is set (and the
// rest partly empty) for a node that did not answer.
type endpointStatus struct {
	Endpoint     string   `json:"endpoint"`
	ID           string   `json:"id"`
	RaftAddr     string   `json:"raft_addr"`
	GossipAddr   string   `json:"gossip_addr"`
	HTTPAddr     string   `json:"http_addr"`
	RaftState    string   `json:"raft_state"`
	Leader       string   `json:"leader"`
	Term         uint64   `json:"term"`
	CommitIndex  uint64   `json:"commit_index"`
	AppliedIndex uint64   `json:"applied_index"`
	LastLogIndex uint64   `json:"last_log_index"`
	Revision     int64    `json:"revision"`
	DBSize       int64    `json:"db_size"`
	Version      string   `json:"version"`
	TLS          bool     `json:"tls"`
	Errors       []string `json:"errors"`
	Error        string   `json:"error"`
}

// endpointHealth is one row of `endpoint health`.
type endpointHealth struct {
	Endpoint string  `json:"endpoint"`
	Health   bool    `json:"health"`
	Took     float64 `json:"took_seconds"`
	Error    string  `json:"error"`
}

// ErrUnhealthy: `endpoint health` found an unhealthy endpoint.
var ErrUnhealthy = errors.New("unhealthy endpoints")

// newEndpointCmd is `raftps endpoint status|health [--cluster]` (etcdctl's).
func newEndpointCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "endpoint", Short: "status and health of each endpoint (or every member with --cluster)"}
	var cluster bool
	c.PersistentFlags().BoolVar(&cluster, "cluster", false, "every member of the cluster (from the member list) instead of --endpoints")
	c.AddCommand(newEndpointStatusCmd(g, &cluster), newEndpointHealthCmd(g, &cluster))
	return c
}

// newEndpointStatusCmd is `raftps endpoint status`; *cluster is the
// parent's --cluster.
func newEndpointStatusCmd(g *globals, cluster *bool) *cobra.Command {
	return &cobra.Command{
		Use: "status", Short: "Raft state, term, indexes, db size and version of each endpoint", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			targets, err := g.endpoints2(cmd.Context(), *cluster)
			if err != nil {
				return err
			}
			rows := make([]endpointStatus, len(targets))
			forEach(len(targets), func(i int) { rows[i] = g.statusOf(cmd.Context(), targets[i]) })
			out := struct {
				Endpoints []endpointStatus `json:"endpoints"`
			}{rows}
			table := make([][]string, 0, len(rows))
			for _, r := range rows {
				errs := strings.Join(append(append([]string(nil), r.Errors...), r.Error), "; ")
				table = append(table, []string{r.Endpoint, r.ID, r.RaftAddr, r.RaftState, r.Leader, fmt.Sprint(r.Term),
					fmt.Sprint(r.CommitIndex), fmt.Sprint(r.AppliedIndex), fmt.Sprint(r.LastLogIndex), fmt.Sprint(r.Revision),
					humanBytes(r.DBSize), r.Version, fmt.Sprint(r.TLS), strings.Trim(errs, "; ")})
			}
			return g.printer.Table(out, []string{"ENDPOINT", "ID", "RAFT ADDR", "STATE", "LEADER", "TERM", "COMMIT", "APPLIED",
				"LAST LOG", "REVISION", "DB SIZE", "VERSION", "TLS", "ERRORS"}, table)
		},
	}
}

// newEndpointHealthCmd is `raftps endpoint health`; *cluster is the
// parent's --cluster.
func newEndpointHealthCmd(g *globals, cluster *bool) *cobra.Command {
	return &cobra.Command{
		Use: "health", Short: "check each endpoint: it knows a leader and serves a linearizable read", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			targets, err := g.endpoints2(cmd.Context(), *cluster)
			if err != nil {
				return err
			}
			rows := make([]endpointHealth, len(targets))
			forEach(len(targets), func(i int) { rows[i] = g.healthOf(cmd.Context(), targets[i].endpoint) })
			out := struct {
				Endpoints []endpointHealth `json:"endpoints"`
			}{rows}
			table := make([][]string, 0, len(rows))
			bad := 0
			for _, r := range rows {
				if !r.Health {
					bad++
				}
				table = append(table, []string{r.Endpoint, fmt.Sprint(r.Health), fmt.Sprintf("%.3fs", r.Took), r.Error})
			}
			if err := g.printer.Table(out, []string{"ENDPOINT", "HEALTH", "TOOK", "ERROR"}, table); err != nil {
				return err
			}
			if bad > 0 {
				return fmt.Errorf("%w: %d of %d", ErrUnhealthy, bad, len(rows))
			}
			return nil
		},
	}
}

// target is one endpoint to query, with what the member list said of it.
type target struct {
	endpoint string
	member   *pb.Member
}

// endpoints2 is --endpoints, or with --cluster every member's gRPC address
// from the member list (a member not announcing one is listed by its ID).
func (g *globals) endpoints2(ctx context.Context, cluster bool) ([]target, error) {
	if !cluster {
		var out []target
		for _, e := range g.endpoints {
			for _, p := range strings.Split(e, ",") {
				if p = strings.TrimSpace(p); p != "" {
					out = append(out, target{endpoint: p})
				}
			}
		}
		return out, nil
	}
	var out []target
	err := g.call(ctx, func(ctx context.Context, cl *client.Client) error {
		resp, err := cl.Cluster.Members(ctx, &pb.MembersRequest{})
		if err != nil {
			return rpcError(err)
		}
		for _, m := range resp.Members {
			ep := m.GrpcAddr
			if ep == "" {
				ep = m.Id
			}
			out = append(out, target{endpoint: ep, member: m})
		}
		return nil
	})
	return out, err
}

// oneClient calls fn with a client of endpoint alone, bounded by
// --dial-timeout and --command-timeout.
func (g *globals) oneClient(parent context.Context, endpoint string, fn func(ctx context.Context, cl *client.Client) error) error {
	h := *g
	h.endpoints = []string{endpoint}
	return h.call(parent, fn)
}

func (g *globals) statusOf(ctx context.Context, t target) endpointStatus {
	r := endpointStatus{Endpoint: t.endpoint, Errors: []string{}}
	if m := t.member; m != nil {
		r.ID, r.RaftAddr, r.GossipAddr, r.HTTPAddr = m.Id, m.RaftAddr, m.GossipAddr, m.HttpAddr
	}
	err := g.oneClient(ctx, t.endpoint, func(ctx context.Context, cl *client.Client) error {
		var p peer.Peer
		st, err := cl.Cluster.Status(ctx, &pb.StatusRequest{}, grpc.Peer(&p))
		if err != nil {
			return rpcError(err)
		}
		// TLS is what this connection negotiated.
		r.TLS = p.AuthInfo != nil && p.AuthInfo.AuthType() == "tls"
		r.ID, r.RaftState, r.Leader, r.Term = st.Id, st.RaftState, st.Leader, st.Term
		r.CommitIndex, r.AppliedIndex, r.LastLogIndex, r.Revision = st.CommitIndex, st.AppliedIndex, st.LastLogIndex, st.Revision
		r.DBSize, r.Version = st.DbSize, st.Version
		r.Errors = append(r.Errors, st.Errors...)
		return nil
	})
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

func (g *globals) healthOf(ctx context.Context, endpoint string) endpointHealth {
	r := endpointHealth{Endpoint: endpoint}
	start := time.Now()
	err := g.oneClient(ctx, endpoint, func(ctx context.Context, cl *client.Client) error {
		st, err := cl.Cluster.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			return rpcError(err)
		}
		if st.Leader == "" {
			return errors.New("no leader")
		}
		if len(st.Errors) > 0 {
			return errors.New(strings.Join(st.Errors, "; "))
		}
		// A linearizable read: the node reaches the leader and a quorum.
		_, err = cl.KV.Range(ctx, &pb.RangeRequest{Key: []byte("health"), CountOnly: true})
		return rpcError(err)
	})
	r.Took = time.Since(start).Seconds()
	r.Health = err == nil
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// forEach runs fn(0..n-1) concurrently and waits.
func forEach(n int, fn func(i int)) {
	done := make(chan struct{}, n)
	for i := range n {
		go func() { fn(i); done <- struct{}{} }()
	}
	for range n {
		<-done
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
