package wire

import (
	"bufio"
	"bytes"
	"errors"
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

// TestReadSizeBuffered: from a bufio.Reader a size is read in place,
// without allocating, with the same results as from any reader.
func TestReadSizeBuffered(t *testing.T) {
	for _, in := range [][]byte{{0, 0, 0, 7, 'x'}, {0x80, 0, 0, 1}, {0, 0}, {}} {
		want, werr := ReadSize(bytes.NewReader(in))
		br := bufio.NewReader(bytes.NewReader(in))
		got, gerr := ReadSize(br)
		if got != want || (gerr == nil) != (werr == nil) || (werr != nil && !errors.Is(gerr, werr)) {
			t.Errorf("%v: buffered %d, %v; plain %d, %v", in, got, gerr, want, werr)
		}
	}
	stream := bytes.Repeat([]byte{0, 0, 1, 0}, 1000)
	br := bufio.NewReader(bytes.NewReader(stream))
	if allocs := testing.AllocsPerRun(100, func() {
		if n, err := ReadSize(br); err != nil || n != 256 {
			t.Fatalf("ReadSize = %d, %v", n, err)
		}
	}); allocs != 0 {
		t.Fatalf("%v allocations per ReadSize from a bufio.Reader", allocs)
	}
}
