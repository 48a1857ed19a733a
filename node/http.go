package node

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/raftps/raftps/raftstore"
	"github.com/raftps/raftps/security"
)

// httpHandler serves /healthz (the process answers), /readyz (no health
// error such as a full disk, a leader is known and the FSM trails the
// commit index by at most readyMaxLag entries; 503 with the reason
// otherwise) and /metrics (Prometheus).
func (n *Node) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if errs := n.healthErrors(); len(errs) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			for _, e := range errs {
				fmt.Fprintf(w, "not ready: %s\n", e)
			}
			return
		}
		st := n.store.Stats()
		if !raftReady(st) {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: leader=%q applied=%d commit=%d\n", st.LeaderID, st.AppliedIndex, st.CommitIndex)
			return
		}
		fmt.Fprintf(w, "ready: leader=%s applied=%d\n", st.LeaderID, st.AppliedIndex)
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	reg.MustRegister(n.store.Collector())
	reg.MustRegister(newNodeCollector(n))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	n.registerTrainingMetrics(reg)
	mux.Handle("/", n.dashboardHandler()) // the web dashboard (package dashboard)
	return mux
}

// readyMaxLag is how many entries the FSM may trail the commit index by
// and still be ready (Consul autopilot's MaxTrailingLogs default). Some
// entries never reach the FSM (the configuration, a new leader's no-op,
// barriers), so its applied index can stay a few entries short of the
// commit index, and every commit leaves it short for a moment: requiring
// applied >= commit made /readyz answer 200 just after an election
// (commit 0) and 503 a moment later (commit 2, applied 0), and could
// flip a readiness probe under any write load. A node replaying its log
// after a restart trails by more and is not ready until it catches up.
const readyMaxLag = 250

// raftReady reports whether st shows a known leader and an FSM within
// readyMaxLag entries of the commit index.
func raftReady(st raftstore.Status) bool {
	return st.LeaderID != "" && st.CommitIndex <= st.AppliedIndex+readyMaxLag
}

// httpTLSConfig is the HTTP port's TLS with HTTPTLS (--http-tls): the
// node's certificate and mutual TLS 1.3 as on the gRPC ports
// (security.Material.ServerConfig: a client certificate signed by the
// cluster CA is required of every connection, and the material reloads
// when its files change), for every path: the dashboard, its API and
// event streams, /metrics, /healthz and /readyz (etcd's client URLs with
// --client-cert-auth do the same). The dashboard then authorises each
// request by its certificate's role. HTTP/2 and HTTP/1.1 are offered.
func (n *Node) httpTLSConfig() *tls.Config {
	return n.tls.ServerConfig(nil, "h2", "http/1.1")
}

// Connection bounds of the HTTP port (issue 32, hole 2's audit): a
// connection must finish its TLS handshake and send its request headers
// within security.HandshakeTimeout (http.Server's ReadHeaderTimeout bounds
// both), a kept-alive connection idle for httpIdleTimeout is closed, and
// at most httpNewPerSource connections from one IP address may be in that
// first phase at once (more are closed on accept).
const (
	httpIdleTimeout  = time.Minute
	httpNewPerSource = 256
)

// httpListener refuses a connection from a source that has
// httpNewPerSource connections that have not yet sent a request; the
// server's ConnState (connState) ends the count when a connection leaves
// http.StateNew.
type httpListener struct {
	net.Listener
	lim *security.SourceLimiter
	mu  sync.Mutex
	src map[net.Conn]string // connections in http.StateNew -> source
}

func newHTTPListener(l net.Listener) *httpListener {
	return &httpListener{Listener: l, lim: security.NewSourceLimiter(httpNewPerSource), src: map[net.Conn]string{}}
}

// Accept returns the next connection under the per-source bound.
func (l *httpListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src, ok := l.lim.Begin(c.RemoteAddr())
		if !ok {
			c.Close()
			continue
		}
		l.mu.Lock()
		l.src[c] = src
		l.mu.Unlock()
		return c, nil
	}
}

// connState is the http.Server's ConnState hook.
func (l *httpListener) connState(c net.Conn, st http.ConnState) {
	if st == http.StateNew {
		return
	}
	l.mu.Lock()
	src, ok := l.src[c]
	delete(l.src, c)
	l.mu.Unlock()
	if ok {
		l.lim.End(src)
	}
}
