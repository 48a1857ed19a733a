package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"testing"
)

// TestExportSafetensors: the safetensors file has an 8-aligned JSON header
// naming every parameter with dtype F32, its shape and contiguous offsets,
// the job's metadata, and the export's values bit for bit; a flipped data
// byte is ErrCorrupt.
func TestExportSafetensors(t *testing.T) {
	dec := DecoderFunc(func([]byte) ([]Block, error) {
		return []Block{
			{Name: "fc.weight", Shape: []int64{2, 3}, Data: []float32{1, -2, 3.5, 0, float32(math.Inf(1)), 6}},
			{Name: "fc.bias", Shape: []int64{2}, Data: []float32{0.25, -0.5}},
		}, nil
	})
	var exp bytes.Buffer
	if err := WriteExport(&exp, ExportHeader{Job: "j", Version: 7, Step: 9}, map[int32][]byte{0: nil}, dec); err != nil {
		t.Fatal(err)
	}
	var st bytes.Buffer
	if err := ExportSafetensors(bytes.NewReader(exp.Bytes()), &st); err != nil {
		t.Fatal(err)
	}
	b := st.Bytes()
	n := binary.LittleEndian.Uint64(b[:8])
	if n%8 != 0 || int(8+n) > len(b) {
		t.Fatalf("header length %d (file %d bytes)", n, len(b))
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatalf("header: %v", err)
	}
	var meta map[string]string
	_ = json.Unmarshal(hdr["__metadata__"], &meta)
	if meta["job"] != "j" || meta["version"] != "7" || meta["step"] != "9" {
		t.Errorf("metadata %v", meta)
	}
	data := b[8+n:]
	type tensor struct {
		DType   string  `json:"dtype"`
		Shape   []int64 `json:"shape"`
		Offsets []int64 `json:"data_offsets"`
	}
	want := map[string][]float32{"fc.weight": {1, -2, 3.5, 0, float32(math.Inf(1)), 6}, "fc.bias": {0.25, -0.5}}
	shapes := map[string][]int64{"fc.weight": {2, 3}, "fc.bias": {2}}
	for name, vals := range want {
		var ts tensor
		if err := json.Unmarshal(hdr[name], &ts); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ts.DType != "F32" || len(ts.Shape) != len(shapes[name]) || ts.Offsets[1]-ts.Offsets[0] != int64(4*len(vals)) {
			t.Fatalf("%s: %+v", name, ts)
		}
		for i, v := range vals {
			got := math.Float32frombits(binary.LittleEndian.Uint32(data[ts.Offsets[0]+int64(4*i):]))
			if math.Float32bits(got) != math.Float32bits(v) {
				t.Errorf("%s[%d] = %v, want %v", name, i, got, v)
			}
		}
	}
	if len(hdr) != 3 {
		t.Errorf("header has %d entries, want 2 tensors and __metadata__", len(hdr))
	}
	bad := bytes.Clone(exp.Bytes())
	bad[len(bad)-1] ^= 1
	if err := ExportSafetensors(bytes.NewReader(bad), &bytes.Buffer{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("flipped data byte: %v, want ErrCorrupt", err)
	}
	if err := ExportSafetensors(bytes.NewReader(exp.Bytes()[:exp.Len()-3]), &bytes.Buffer{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("short file: %v, want ErrCorrupt", err)
	}
}
