// Package wire holds the byte-level pieces both daemons' TCP protocols share:
// magic strings, frame types, framing helpers and client-visible errors.
package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Magic strings a client sends first to pick a protocol.
const (
	MagicV1 = "  V1" // nsqd -> nsqlookupd registration
	MagicV2 = "  V2" // clients -> nsqd
)

// Frame types of protocol V2.
const (
	FrameTypeResponse int32 = 0
	FrameTypeError    int32 = 1
	FrameTypeMessage  int32 = 2
)

// Common response payloads.
var (
	OK        = []byte("OK")
	Heartbeat = []byte("_heartbeat_")
	CloseWait = []byte("CLOSE_WAIT")
)

// WriteFrame writes a V2 frame [size][type][data]. The header lives in a
// stack array so a large data slice is never copied into a growing buffer.
func WriteFrame(w io.Writer, frameType int32, data []byte) error {
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[0:4], uint32(len(data)+4))
	binary.BigEndian.PutUint32(hdr[4:8], uint32(frameType))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

// WriteV1Response writes a lookupd V1 reply: [size][data], no frame type.
func WriteV1Response(w io.Writer, data []byte) error {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(data)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

// ReadSize reads a big-endian int32 length prefix. From a *bufio.Reader
// (every connection's) it reads in place, without the allocation that a
// buffer handed to an io.Reader costs.
func ReadSize(r io.Reader) (int32, error) {
	if br, ok := r.(*bufio.Reader); ok {
		b, err := br.Peek(4)
		if err != nil {
			if len(b) > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		v := binary.BigEndian.Uint32(b)
		_, _ = br.Discard(4)
		return int32(v), nil
	}
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return int32(binary.BigEndian.Uint32(b[:])), nil
}

// ClientErr is a non-fatal protocol error: the error frame is sent and the
// connection stays open.
type ClientErr struct {
	Code string
	Desc string
	// Parent is what caused the error, for the log only: the client is
	// sent Code and Desc.
	Parent error
}

func (e *ClientErr) Error() string { return e.Code + " " + e.Desc }

// WithParent sets the error's Parent and returns it.
func (e *ClientErr) WithParent(parent error) *ClientErr {
	e.Parent = parent
	return e
}

// FatalClientErr is sent and then the connection is closed. It is a separate
// type, not a flag, so a handler cannot forget to say which one it meant.
type FatalClientErr struct {
	Code   string
	Desc   string
	Parent error // as ClientErr's
}

func (e *FatalClientErr) Error() string { return e.Code + " " + e.Desc }

// WithParent sets the error's Parent and returns it.
func (e *FatalClientErr) WithParent(parent error) *FatalClientErr {
	e.Parent = parent
	return e
}

// NewClientErr builds a non-fatal error with a formatted description.
func NewClientErr(code, format string, args ...any) *ClientErr {
	return &ClientErr{Code: code, Desc: fmt.Sprintf(format, args...)}
}

// NewFatalClientErr builds a fatal error with a formatted description.
func NewFatalClientErr(code, format string, args ...any) *FatalClientErr {
	return &FatalClientErr{Code: code, Desc: fmt.Sprintf(format, args...)}
}

// ParentContext is what NSQ's log line of an error sent to a client adds
// to the error's text: " - " and the parent's text, or nothing when err is
// not a client error or has no parent.
func ParentContext(err error) string {
	var parent error
	switch e := err.(type) {
	case *ClientErr:
		parent = e.Parent
	case *FatalClientErr:
		parent = e.Parent
	}
	if parent == nil {
		return ""
	}
	return " - " + parent.Error()
}
