package wire

import (
	"bytes"
	"testing"
)

func TestWriteFrame(t *testing.T) {
	var b bytes.Buffer
	if err := WriteFrame(&b, FrameTypeError, []byte("E_INVALID x")); err != nil {
		t.Fatal(err)
	}
	want := append([]byte{0, 0, 0, 15, 0, 0, 0, 1}, "E_INVALID x"...)
	if !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("frame = %v, want %v", b.Bytes(), want)
	}
	n, err := ReadSize(bytes.NewReader(b.Bytes()))
	if err != nil || n != 15 {
		t.Fatalf("ReadSize = %d, %v", n, err)
	}
}

func TestWriteV1Response(t *testing.T) {
	var b bytes.Buffer
	if err := WriteV1Response(&b, OK); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), []byte{0, 0, 0, 2, 'O', 'K'}) {
		t.Fatalf("got %v", b.Bytes())
	}
}

func TestErrorText(t *testing.T) {
	if got := NewFatalClientErr("E_INVALID", "bad %d", 1).Error(); got != "E_INVALID bad 1" {
		t.Fatal(got)
	}
	if got := NewClientErr("E_FIN_FAILED", "x").Error(); got != "E_FIN_FAILED x" {
		t.Fatal(got)
	}
}
