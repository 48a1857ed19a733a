package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// An export of a newer format is refused as such, not as corrupt bytes.
func TestReadExportHeaderRefusesNewerFormat(t *testing.T) {
	var buf bytes.Buffer
	dec := DecoderFunc(func([]byte) ([]Block, error) {
		return []Block{{Name: "w", Shape: []int64{1}, Data: []float32{1}}}, nil
	})
	if err := WriteExport(&buf, ExportHeader{Job: "j", Version: 1}, map[int32][]byte{0: nil}, dec); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if _, err := ReadExportHeader(bytes.NewReader(b)); err != nil {
		t.Fatalf("current format: %v", err)
	}
	binary.LittleEndian.PutUint32(b[8:], ExportFormatVersion+1)
	_, err := ReadExportHeader(bytes.NewReader(b))
	if !errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("format %d: %v, want ErrNewerFormat", ExportFormatVersion+1, err)
	}
}
