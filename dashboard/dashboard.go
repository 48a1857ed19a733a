package dashboard

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftps/raftps/raftstore/client"
)

// ErrNoEndpoints: Config.Endpoints is empty.
var ErrNoEndpoints = errors.New("dashboard: no gRPC endpoints")

// VerifyFunc re-hashes every blob of a job's checkpoint version on every
// replica and returns the mismatches (empty: all copies intact), each a
// value the verify call answers as JSON. The node adapts
// checkpoint.Manager.Verify to it (the dashboard imports no pserver
// package).
type VerifyFunc func(ctx context.Context, job string, version int64) ([]any, error)

// Config configures a Dashboard.
type Config struct {
	// Endpoints are gRPC client API addresses (host:port) the dashboard
	// reads the cluster through; a node passes its own.
	Endpoints []string
	// Verify, if set, backs the checkpoints table's verify button.
	Verify VerifyFunc
	// ReadOnly refuses cancel, delete and verify with 403 to requests
	// without a verified client certificate. A request with one (the
	// HTTP port serving mutual TLS) is authorised by its certificate's
	// role instead, as the gRPC API would authorise it
	// (security.Roles): every role reads; cancel and delete need admin
	// (or node); verify is a read. A refusal is 403 naming the role.
	ReadOnly bool
	// Logger; nil discards.
	Logger *slog.Logger
	// DialOptions are added to the client's (TLS credentials).
	DialOptions []grpc.DialOption
	// MetricsTLS, if set, is the TLS client configuration for a member's
	// /metrics at host serverName (the replicated slots' lag): the members
	// serve their HTTP port over mutual TLS (--http-tls). Nil reads http.
	MetricsTLS func(serverName string) *tls.Config
}

// Request timeouts: an API call; one member's Status and the slot read of
// the cluster view; the cluster watcher's poll interval.
const (
	callTimeout   = 5 * time.Second
	memberTimeout = 300 * time.Millisecond
	watchInterval = 250 * time.Millisecond
)

// Dashboard is the dashboard's http.Handler. Close ends its event streams
// and its cluster watcher.
type Dashboard struct {
	cfg    Config
	log    *slog.Logger
	cl     *client.Client
	mux    *http.ServeMux
	assets fs.FS
	events *clusterLog

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	members map[string]*client.Client // gRPC address -> client, for Status per member

	metrics       *http.Client // members' /metrics (replicas.go)
	metricsScheme string
}

// New returns a dashboard reading the cluster through cfg.Endpoints. It
// connects lazily and starts the cluster watcher.
func New(cfg Config) (*Dashboard, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, ErrNoEndpoints
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cl, err := client.New(cfg.Endpoints, cfg.DialOptions...)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dashboard{cfg: cfg, log: cfg.Logger, cl: cl, assets: Assets(), events: newClusterLog(512),
		ctx: ctx, cancel: cancel, members: map[string]*client.Client{}}
	d.metrics, d.metricsScheme = newMetricsClient(cfg.MetricsTLS)
	d.routes()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.watchCluster(ctx)
	}()
	return d, nil
}

// Close stops the cluster watcher, ends every open event stream and closes
// the connections. Safe twice.
func (d *Dashboard) Close() error {
	d.cancel()
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	for addr, c := range d.members {
		c.Close()
		delete(d.members, addr)
	}
	if d.cl != nil {
		d.cl.Close()
		d.cl = nil
	}
	return nil
}

func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) { d.mux.ServeHTTP(w, r) }

func (d *Dashboard) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", d.serveIndex)
	m.Handle("GET /ui/", http.StripPrefix("/ui/", http.HandlerFunc(d.serveAsset)))
	m.HandleFunc("GET /api/identity", d.allow(actRead, d.handleIdentity))
	m.HandleFunc("GET /api/cluster", d.allow(actRead, d.handleCluster))
	m.HandleFunc("GET /api/cluster/events", d.allow(actRead, d.handleClusterEvents))
	m.HandleFunc("GET /api/jobs", d.allow(actRead, d.handleJobs))
	m.HandleFunc("GET /api/jobs/{job}", d.allow(actRead, d.handleJob))
	m.HandleFunc("GET /api/jobs/{job}/events", d.allow(actRead, d.handleEvents))
	m.HandleFunc("POST /api/jobs/{job}/cancel", d.write(actCancel, d.handleCancel))
	m.HandleFunc("POST /api/jobs/{job}/delete", d.write(actDelete, d.handleDelete))
	m.HandleFunc("POST /api/jobs/{job}/checkpoints/{version}/verify", d.write(actVerify, d.handleVerify))
	d.mux = m
}

// serveIndex serves the page. The security headers keep every fetch on
// this origin (no external URL could load even if one slipped in).
func (d *Dashboard) serveIndex(w http.ResponseWriter, r *http.Request) {
	b, err := fs.ReadFile(d.assets, "index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	setPageHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b)
}

func (d *Dashboard) serveAsset(w http.ResponseWriter, r *http.Request) {
	setPageHeaders(w)
	// Embedded files never change within a binary.
	w.Header().Set("Cache-Control", "no-cache")
	http.FileServerFS(d.assets).ServeHTTP(w, r)
}

func setPageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// writeHeader is the header a write (POST) must carry: a cross-site HTML
// form cannot set it, and a cross-site script needs a CORS preflight this
// server never grants.
const writeHeader = "X-Raftps-Request"

// errReadOnly: the dashboard was configured read-only.
var errReadOnly = errors.New("this dashboard is read-only (the node runs with the dashboard's writes disabled)")

// write wraps a write handler: the request must carry writeHeader and be
// allowed act (authorize); a write allowed by a certificate is logged with
// its identity.
func (d *Dashboard) write(act string, h http.HandlerFunc) http.HandlerFunc {
	return d.allow(act, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(writeHeader) == "" {
			writeError(w, http.StatusForbidden, fmt.Errorf("a write needs the %s header (sent by the dashboard's page)", writeHeader))
			return
		}
		if id, ok := identityOf(r); ok {
			d.log.Info("dashboard: write", "action", act, "path", r.URL.Path, "name", id.Name, "role", id.Role, "peer", r.RemoteAddr)
		}
		h(w, r)
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		// The status line is already out; nothing more to tell the client.
		return
	}
}

// apiError is the JSON body of an error response.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"` // the gRPC code, if the error came from a call
}

func writeError(w http.ResponseWriter, httpStatus int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	e := apiError{Error: err.Error()}
	if s, ok := status.FromError(err); ok && s.Code() != codes.OK && s.Code() != codes.Unknown {
		e.Error, e.Code = s.Message(), s.Code().String()
	}
	json.NewEncoder(w).Encode(e)
}

// writeRPCError maps a gRPC error to its HTTP status.
func writeRPCError(w http.ResponseWriter, err error) {
	writeError(w, httpStatusOf(err), err)
}

func httpStatusOf(err error) int {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	}
	switch status.Code(err) {
	case codes.NotFound:
		return http.StatusNotFound
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.FailedPrecondition, codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Unimplemented:
		return http.StatusNotImplemented
	}
	return http.StatusBadGateway
}

// memberClient returns a cached client for one member's gRPC address.
func (d *Dashboard) memberClient(addr string) (*client.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.members[addr]; ok {
		return c, nil
	}
	if d.ctx.Err() != nil {
		return nil, d.ctx.Err()
	}
	c, err := client.New([]string{addr}, d.cfg.DialOptions...)
	if err != nil {
		return nil, err
	}
	d.members[addr] = c
	return c, nil
}
