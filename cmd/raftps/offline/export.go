package offline

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/google/renameio/v2"

	"github.com/raftps/raftps/pserver/checkpoint"
	"github.com/raftps/raftps/pserver/vshard"
)

// VShardDecoder decodes pserver vshard blobs for export
// (vshard.DecodeValues: shapes and offsets checked, errors wrap
// wire.ErrCorrupt).
var VShardDecoder = checkpoint.DecoderFunc(func(blob []byte) ([]checkpoint.Block, error) {
	runs, err := vshard.DecodeValues(blob)
	if err != nil {
		return nil, err
	}
	out := make([]checkpoint.Block, len(runs))
	for i, r := range runs {
		out[i] = checkpoint.Block{Name: r.Name, Shape: r.Shape, Offset: r.Offset, Data: r.Data}
	}
	return out, nil
})

// ParseFileMode parses an octal permission (--mode "0600").
func ParseFileMode(s string) (os.FileMode, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return 0, fmt.Errorf("--mode %q: want octal permission bits such as 0600 or 0640", s)
	}
	return os.FileMode(m), nil
}

// ExportFile writes version v of job to the file out (ExportAs) through
// WriteFileAtomicMode with permission bits perm: a failed or killed export
// leaves out as it was.
func ExportFile(ctx context.Context, mgr *checkpoint.Manager, job string, v int64, format, out string, perm os.FileMode) error {
	return WriteFileAtomicMode(out, perm, func(w io.Writer) error { return ExportAs(ctx, mgr, job, v, format, w) })
}

// WriteFileAtomic is WriteFileAtomicMode with mode 0600.
func WriteFileAtomic(path string, write func(io.Writer) error) error {
	return WriteFileAtomicMode(path, 0o600, write)
}

// WriteFileAtomicMode makes path hold exactly what write writes, or leaves
// it as it was: write goes to a temporary file created with permission
// bits perm (whatever the umask) in path's directory (so the rename stays
// on one file system), which is fsynced and renamed over path only if
// write succeeds, and removed otherwise (google/renameio). A process
// killed mid-write leaves path untouched and at most a ".<base>NNN"
// temporary file beside it.
func WriteFileAtomicMode(path string, perm os.FileMode, write func(io.Writer) error) error {
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(filepath.Dir(path)), renameio.WithStaticPermissions(perm))
	if err != nil {
		return err
	}
	defer f.Cleanup()
	if err := write(f); err != nil {
		return err
	}
	return f.CloseAtomicallyReplace()
}

// ExportAs writes version v of job to w in format "raftps" or
// "safetensors" (the raftps export streamed through
// checkpoint.ExportSafetensors).
func ExportAs(ctx context.Context, mgr *checkpoint.Manager, job string, v int64, format string, w io.Writer) error {
	if format != "safetensors" {
		return mgr.Export(ctx, job, v, VShardDecoder, w)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(mgr.Export(ctx, job, v, VShardDecoder, pw)) }()
	err := checkpoint.ExportSafetensors(pr, w)
	pr.CloseWithError(err)
	return err
}
