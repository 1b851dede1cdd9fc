package diskqueue

import (
	"encoding/binary"
	"os"
	"testing"
)

// FuzzRecovery: Open on arbitrary segment and metadata bytes never panics
// and reads only well-formed records; and after a crash that cut the last
// segment anywhere, with arbitrary metadata numbers, only records that Put
// appended whole are ever returned (never a partial or spliced one).
// `make test` runs the seeds; `make fuzz` fuzzes it.
func FuzzRecovery(f *testing.F) {
	rec := func(n int) []byte {
		return binary.BigEndian.AppendUint32(nil, uint32(n))
	}
	valid := append(append(rec(10), testRec(1, 10)...), append(rec(12), testRec(2, 12)...)...)
	f.Add(valid, []byte("2\n0,0\n0,26\n"), uint16(26), uint8(5), uint8(3))
	f.Add(valid, []byte("0\n0,14\n0,26\n"), uint16(20), uint8(40), uint8(1))
	f.Add([]byte{0, 0, 0, 200, 1, 2}, []byte("garbage"), uint16(0), uint8(0), uint8(0))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, []byte("-1\n-5,3\n2,-9\n"), uint16(9999), uint8(200), uint8(9))
	f.Add([]byte{}, []byte("0\n999999,0\n999999,0\n"), uint16(1), uint8(30), uint8(2))
	f.Fuzz(func(t *testing.T, seg0, meta []byte, cut uint16, nrec, rollAt uint8) {
		o := testOpts(t.TempDir())
		o.MaxBytesPerFile = 256
		o.MaxMsgSize = 1 << 10
		// Arbitrary bytes.
		writeFile(t, seg(o.DataPath, 0), seg0)
		writeFile(t, seg(o.DataPath, 1), seg0)
		writeFile(t, metaOf(o.DataPath), meta)
		q, err := Open(o)
		if err == nil {
			q.Peek(100, func(r []byte) bool { return true })
			for range 1000 {
				r, err := q.Next()
				if err != nil {
					break
				}
				if len(r) < int(o.MinMsgSize) || len(r) > int(o.MaxMsgSize) {
					t.Fatalf("record of %d bytes", len(r))
				}
			}
			q.Close()
		}

		// Records written whole, then a crash cut the last segment, and
		// the metadata says anything, a read position inside a record
		// included.
		o.DataPath = t.TempDir()
		q = mustOpen(t, o)
		n := int(nrec % 64)
		for i := range n {
			mustPut(t, q, testRec(i, 8+(i*7)%60))
		}
		q.crash()
		segs := liveSegments(t, o.DataPath, testName)
		if len(segs) > 0 {
			last := seg(o.DataPath, segs[len(segs)-1])
			if size := fileSize(t, last); size > 0 {
				os.Truncate(last, int64(cut)%size)
			}
		}
		if len(meta) > 0 && meta[0]%2 == 0 {
			r := int64(rollAt)
			writeFile(t, metaOf(o.DataPath), metaState{int64(nrec), r % 8, int64(cut) % 300, r / 8, int64(cut)}.appendText(nil))
		}
		q, err = Open(o)
		if err != nil {
			return
		}
		defer q.Close()
		for range 1000 {
			r, err := q.Next()
			if err != nil {
				break
			}
			if len(r) < 8 {
				t.Fatalf("record of %d bytes", len(r))
			}
			i := int(binary.BigEndian.Uint64(r))
			if i < 0 || i >= n {
				t.Fatalf("record with index %d; only %d were put", i, n)
			}
			checkRec(t, r, i, 8+(i*7)%60)
		}
	})
}
