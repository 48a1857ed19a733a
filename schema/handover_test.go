package schema

import (
	"testing"
	"time"
)

// TestHandoverWaitCoversHolderFence: for every age of the holder's last
// keepalive and every clock rate within HandoverDrift on the holder, the
// leader and the claimant, a claimant that waits HandoverWait on its own
// clock from the moment it reads the record serves after the holder's
// watchdog fired (PServerFence on the holder's clock after its send), with
// HandoverMargin to spare. It also checks the wait is shorter when the
// last keepalive is older, and 0 once the fence is surely past.
func TestHandoverWaitCoversHolderFence(t *testing.T) {
	const ttl = 5
	rates := []float64{1 / (1 + HandoverDrift), 1, 1 + HandoverDrift} // local seconds per real second
	prev := time.Duration(1 << 62)
	for since := time.Duration(0); since <= 6*time.Second; since += 100 * time.Millisecond {
		w := HandoverWait(ttl, since)
		if w > prev {
			t.Fatalf("wait %v for a keepalive %v old exceeds %v for a younger one", w, since, prev)
		}
		prev = w
		for _, holder := range rates {
			for _, leader := range rates {
				for _, claimant := range rates {
					// Real time 0: the leader measures since on its clock;
					// the keepalive was sent no later than it arrived.
					sent := -since.Seconds() / leader
					fence := sent + PServerFence(ttl).Seconds()/holder
					serve := w.Seconds() / claimant // read at real time >= 0
					if w > 0 && serve < fence+HandoverMargin.Seconds()/(1+HandoverDrift)-1e-9 {
						t.Fatalf("since %v, rates holder %v leader %v claimant %v: serve at %.3fs, holder fences at %.3fs",
							since, holder, leader, claimant, serve, fence)
					}
					if w == 0 && fence > 0 {
						t.Fatalf("since %v: no wait, but the holder may fence %.3fs later", since, fence)
					}
				}
			}
		}
	}
	if w := HandoverWait(ttl, 0); w >= ttl*time.Second {
		t.Fatalf("wait for a fresh keepalive %v, want below the TTL", w)
	}
	if w := HandoverWait(ttl, time.Hour); w != 0 {
		t.Fatalf("wait for an hour-old keepalive %v, want 0", w)
	}
}

func TestHandoverRecordRoundTrip(t *testing.T) {
	r := HandoverRecord{Node: "n1", Incarnation: 7, Lease: 3, RevokedRevision: 9, SinceKeepAliveNanos: 5, WaitNanos: 6, ConsumedBy: 11}
	got, err := ParseHandoverRecord(r.Marshal())
	if err != nil || got != r {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if _, err := ParseHandoverRecord([]byte(`{"wait_nanos":-1}`)); err == nil {
		t.Fatal("negative wait accepted")
	}
	if _, err := ParseHandoverRecord([]byte(`{`)); err == nil {
		t.Fatal("truncated record accepted")
	}
	if got := HandoverKey("j", 2); got != "/jobs/j/handovers/2" {
		t.Fatalf("HandoverKey: %q", got)
	}
	if job, kind, id, ok := ParseJobKey(HandoverKey("j", 2)); !ok || job != "j" || kind != KindHandover || id != "2" {
		t.Fatalf("ParseJobKey(HandoverKey): %q %q %q %v", job, kind, id, ok)
	}
}
