package dashboard

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	pb "github.com/raftps/raftps/api/raftpspb"
)

// lagMetric is the gauge a replicated slot's primary exports per job and
// slot (pserver/agent): updates it applied that its in-sync backups have
// not all acknowledged yet.
const lagMetric = "raftps_pserver_replication_lag_updates"

// replicaView is one replicated pserver slot (a job with replicas >= 2)
// as its replica record says (pserver/DESIGN.md, "Replicated slots"): the
// primary node, the in-sync backups, the record's epoch, and the slot's
// replication lag in updates read from its primary's /metrics (nil when
// the primary did not answer or exports no such slot).
type replicaView struct {
	Slot    int32    `json:"slot"`
	Primary string   `json:"primary"`
	Backups []string `json:"backups"`
	Epoch   int64    `json:"epoch"`
	Lag     *float64 `json:"lag"`
}

// replicaViews are j's slots that have a replica record, by slot.
func replicaViews(j *pb.JobStatus) []replicaView {
	out := []replicaView{}
	for _, p := range j.Pservers {
		if p.ReplicaEpoch <= 0 {
			continue
		}
		b := p.Backups
		if b == nil {
			b = []string{}
		}
		out = append(out, replicaView{Slot: p.Index, Primary: p.Node, Backups: b, Epoch: p.ReplicaEpoch})
	}
	return out
}

// newMetricsClient reads members' /metrics: over https with
// tlsFor(host) when set (the members serve --http-tls), else http.
func newMetricsClient(tlsFor func(serverName string) *tls.Config) (*http.Client, string) {
	if tlsFor == nil {
		return &http.Client{Timeout: memberTimeout}, "http"
	}
	tr := &http.Transport{DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		return (&tls.Dialer{Config: tlsFor(host)}).DialContext(ctx, network, addr)
	}}
	return &http.Client{Transport: tr, Timeout: memberTimeout}, "https"
}

// fillLag sets the Lag of v's replicas from their primaries' /metrics
// (each asked once, in parallel, memberTimeout each); a primary that does
// not answer leaves its slots' Lag nil.
func (d *Dashboard) fillLag(ctx context.Context, v *jobView) {
	if len(v.ReplicaSlots) == 0 {
		return
	}
	mctx, cancel := context.WithTimeout(ctx, memberTimeout)
	defer cancel()
	mr, err := d.cl.Cluster.Members(mctx, &pb.MembersRequest{})
	if err != nil {
		return
	}
	httpAddr := map[string]string{}
	for _, m := range mr.Members {
		httpAddr[m.Id] = m.HttpAddr
	}
	lags := map[string]map[string]float64{} // primary -> "job/slot" -> lag
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range v.ReplicaSlots {
		addr := httpAddr[r.Primary]
		if _, asked := lags[r.Primary]; asked || addr == "" {
			continue
		}
		lags[r.Primary] = nil
		wg.Add(1)
		go func(node, addr string) {
			defer wg.Done()
			got, err := d.scrapeLag(mctx, addr)
			if err != nil {
				d.log.Debug("replication lag", "node", node, "err", err)
				return
			}
			mu.Lock()
			lags[node] = got
			mu.Unlock()
		}(r.Primary, addr)
	}
	wg.Wait()
	for i := range v.ReplicaSlots {
		r := &v.ReplicaSlots[i]
		if lag, ok := lags[r.Primary][v.Name+"/"+strconv.Itoa(int(r.Slot))]; ok {
			r.Lag = &lag
		}
	}
}

// scrapeLag reads lagMetric from the /metrics of the member at addr,
// keyed "job/slot".
func (d *Dashboard) scrapeLag(ctx context.Context, addr string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.metricsScheme+"://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := d.metrics.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s/metrics: %w", addr, err)
	}
	out := map[string]float64{}
	for _, m := range fams[lagMetric].GetMetric() {
		var job, slot string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "job":
				job = l.GetValue()
			case "slot":
				slot = l.GetValue()
			}
		}
		out[job+"/"+slot] = m.GetGauge().GetValue()
	}
	return out, nil
}
