package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	pb "github.com/raftps/raftps/api/raftpspb"
	"github.com/raftps/raftps/security"
)

// ErrForbidden: the role of the request's client certificate may not do
// what the request asks (403; the message names the role, the certificate
// and the roles that may).
var ErrForbidden = errors.New("forbidden")

// Actions of the dashboard and the gRPC method whose roles decide who may
// do each (security.Roles): the dashboard calls the API with the node's
// certificate, so it checks the user's role itself, as the API would.
const (
	actRead   = "read"
	actCancel = "cancel"
	actDelete = "delete"
	actVerify = "verify"
)

// The dashboard shows every job with its checkpoints: the roles that may
// read every job's checkpoints (not a trainer, which reads only its own
// jobs through the API). Verify hashes every blob of a checkpoint: as
// VerifyBlob, admin only.
var actionMethod = map[string]string{
	actRead:   pb.CheckpointStore_GetManifest_FullMethodName,
	actCancel: pb.Master_CancelJob_FullMethodName,
	actDelete: pb.Master_DeleteJob_FullMethodName,
	actVerify: pb.CheckpointStore_VerifyBlob_FullMethodName,
}

// writeActions are the actions that need Config.ReadOnly off when the
// request carries no client certificate.
var writeActions = []string{actCancel, actDelete, actVerify}

// identityOf is the identity of r's verified client certificate (the
// first certificate of the first chain the TLS server verified against
// the cluster CA); false when r came without one (plaintext HTTP, or a
// TLS server that does not verify client certificates).
func identityOf(r *http.Request) (security.Identity, bool) {
	c := security.VerifiedCert(r.TLS)
	if c == nil {
		return security.Identity{}, false
	}
	return security.IdentityOf(c), true
}

// authorize decides whether r may do act: with a verified client
// certificate, its role must be one of security.Roles of the action's
// gRPC method (ErrForbidden naming the role otherwise); without one, reads
// are allowed and writes unless Config.ReadOnly (errReadOnly).
func (d *Dashboard) authorize(r *http.Request, act string) error {
	id, ok := identityOf(r)
	if !ok {
		if d.cfg.ReadOnly && slices.Contains(writeActions, act) {
			return errReadOnly
		}
		return nil
	}
	roles := security.Roles(actionMethod[act])
	if slices.Contains(roles, id.Role) {
		return nil
	}
	what := act + " jobs"
	switch act {
	case actRead:
		what = "read the dashboard"
	case actVerify:
		what = "verify checkpoints"
	}
	role := id.Role
	if role == "" {
		role = "none"
	}
	return fmt.Errorf("%w: role %s (certificate %q) may not %s; roles that may: %s", ErrForbidden, role, id.Name, what, strings.Join(roles, ", "))
}

// allow wraps h with authorize(act): 403 and the reason when refused.
func (d *Dashboard) allow(act string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := d.authorize(r, act); err != nil {
			if errors.Is(err, ErrForbidden) {
				id, _ := identityOf(r)
				d.log.Warn("dashboard: permission denied", "action", act, "name", id.Name, "role", id.Role, "peer", r.RemoteAddr)
			}
			writeError(w, http.StatusForbidden, err)
			return
		}
		h(w, r)
	}
}

// identityView is GET /api/identity: who the request's certificate says
// the user is and what the page may offer them.
type identityView struct {
	// TLS: the request came with a verified client certificate.
	TLS  bool   `json:"tls"`
	Name string `json:"name,omitempty"`
	Role string `json:"role,omitempty"`
	// Can maps each write (cancel, delete, verify) to whether it is allowed.
	Can map[string]bool `json:"can"`
}

func (d *Dashboard) handleIdentity(w http.ResponseWriter, r *http.Request) {
	id, ok := identityOf(r)
	v := identityView{TLS: ok, Name: id.Name, Role: id.Role, Can: map[string]bool{}}
	for _, act := range writeActions {
		v.Can[act] = d.authorize(r, act) == nil
	}
	writeJSON(w, v)
}
