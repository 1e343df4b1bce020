package activities

import (
	"bytes"
	stdgzip "compress/gzip"
	"fmt"
	"io"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// TestGzipDeterministic: a chunk is rewritten by a retry, possibly on another worker with a
// pooled compressor that last compressed something else. Its bytes must depend only on its
// input: fresh and pooled writers agree, however the input was split into writes, and the
// result reads back with the standard library.
func TestGzipDeterministic(t *testing.T) {
	var raw bytes.Buffer
	for i := range 200_000 {
		fmt.Fprintf(&raw, "%d,Customer %d,US,pro,2022-%02d-%02d\n", i, i, i%12+1, i%28+1)
	}
	in := raw.Bytes()
	fresh := func(pieces int) []byte {
		var out bytes.Buffer
		zw, err := gzip.NewWriterLevel(&out, gzipLevel)
		if err != nil {
			t.Fatal(err)
		}
		step := len(in)/pieces + 1
		for off := 0; off < len(in); off += step {
			if _, err := zw.Write(in[off:min(off+step, len(in))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	want := fresh(1)
	for _, pieces := range []int{3, 1000} {
		if !bytes.Equal(fresh(pieces), want) {
			t.Fatalf("%d writes: other bytes", pieces)
		}
	}
	for range 3 {
		if _, err := gzipMember([]byte("something else entirely")); err != nil {
			t.Fatal(err)
		}
		got, err := gzipMember(in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatal("pooled writer: other bytes than a fresh one")
		}
	}
	zr, err := stdgzip.NewReader(bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(back, in) {
		t.Fatalf("stdlib gunzip: %v", err)
	}
}
