package checkpoint

import (
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// ExportSafetensors converts an export file (FORMAT.md §1) read from r into
// a safetensors file written to w (the format of Hugging Face's
// safetensors: an 8-byte little-endian header length N, N bytes of JSON
// header padded with spaces to a multiple of 8, then the data): one F32
// tensor per parameter with its name and shape, row-major, so that
// torch's load_state_dict (or safetensors.torch.load_file) takes it as
// is. __metadata__ holds format "raftps", job, version and step.
//
// The data section is streamed through and checked against the export's
// data_md5; a mismatch, a short file or a header whose params are not
// contiguous is ErrCorrupt (w then holds a partial file).
func ExportSafetensors(r io.Reader, w io.Writer) error {
	h, err := ReadExportHeader(r)
	if err != nil {
		return err
	}
	// Build the header by hand to keep the params in data order (JSON
	// objects are unordered; readers use the offsets).
	var hdr bytes.Buffer
	meta, _ := json.Marshal(map[string]string{"format": "raftps", "job": h.Job,
		"version": strconv.FormatInt(h.Version, 10), "step": strconv.FormatInt(h.Step, 10)})
	hdr.WriteString(`{"__metadata__":`)
	hdr.Write(meta)
	var off int64
	for _, p := range h.Params {
		if p.Offset != off || p.Bytes < 0 {
			return fmt.Errorf("%w: export param %q at offset %d with %d bytes, want offset %d", ErrCorrupt, p.Name, p.Offset, p.Bytes, off)
		}
		name, _ := json.Marshal(p.Name)
		shape := p.Shape
		if shape == nil {
			shape = []int64{}
		}
		sh, _ := json.Marshal(shape)
		fmt.Fprintf(&hdr, `,%s:{"dtype":"F32","shape":%s,"data_offsets":[%d,%d]}`, name, sh, off, off+p.Bytes)
		off += p.Bytes
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(hdr.Len()))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(hdr.Bytes()); err != nil {
		return err
	}
	sum := md5.New()
	copied, err := io.Copy(io.MultiWriter(w, sum), io.LimitReader(r, off))
	if err != nil {
		return err
	}
	if copied != off {
		return fmt.Errorf("%w: export data section has %d bytes, header says %d", ErrCorrupt, copied, off)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); h.DataMD5 != "" && got != h.DataMD5 {
		return fmt.Errorf("%w: export data md5 %s, header says %s", ErrCorrupt, got, h.DataMD5)
	}
	return nil
}
