package spill

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
)

// A run file is a sorted run of records:
//
//	uvarint(record count)
//	per record: uvarint(len(key)) key uvarint(len(value)) value
//	CRC-32C (Castagnoli) of all the bytes above, 4 bytes big-endian
//
// The count makes a file cut at a record boundary an error, not a shorter
// run; the checksum catches the bytes that changed.

// ErrCorrupt is wrapped by the error of a run file that was truncated or
// corrupted since it was written.
var ErrCorrupt = errors.New("corrupt or truncated run file")

// bufferSize is the buffer of each run's reader and writer: large enough for
// sequential disk I/O, small enough for maxOpenRuns of them.
const bufferSize = 64 << 10

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// run is a run file written and closed, to be read back.
type run struct {
	path  string
	count uint64
}

// runWriter writes a run file. Write errors are kept by the bufio.Writer and
// returned by finish.
type runWriter struct {
	f       *os.File
	w       *bufio.Writer
	count   uint64 // records the header promised
	crc     uint32
	written int64
	scratch [binary.MaxVarintLen64]byte // a length's bytes, kept here not to allocate per record
}

func newRunWriter(f *os.File, count uint64) *runWriter {
	w := &runWriter{f: f, w: bufio.NewWriterSize(f, bufferSize), count: count}
	w.uvarint(count)
	return w
}

func (w *runWriter) write(p []byte) {
	w.crc = crc32.Update(w.crc, castagnoli, p)
	w.w.Write(p)
	w.written += int64(len(p))
}

func (w *runWriter) uvarint(x uint64) {
	w.write(binary.AppendUvarint(w.scratch[:0], x))
}

func (w *runWriter) record(key, value []byte) {
	w.uvarint(uint64(len(key)))
	w.write(key)
	w.uvarint(uint64(len(value)))
	w.write(value)
}

// finish writes the checksum, flushes and closes the file.
func (w *runWriter) finish() (run, error) {
	w.w.Write(binary.BigEndian.AppendUint32(nil, w.crc))
	w.written += 4
	err := errors.Join(w.w.Flush(), w.f.Close())
	if err != nil {
		return run{}, fmt.Errorf("spill: writing run %s: %w", w.f.Name(), err)
	}
	return run{path: w.f.Name(), count: w.count}, nil
}

// runReader reads a run file back, checking it as it goes.
type runReader struct {
	path   string
	f      *os.File
	r      *bufio.Reader
	left   uint64 // records not read yet
	unread int64  // bytes of the file not read yet: no length may exceed it
	crc    uint32
	k, v   []byte // the current record, reused by the next
	e      error
	done   bool

	scratch [binary.MaxVarintLen64]byte // a length's bytes, kept here not to allocate per record
}

func openRunReader(r run) (*runReader, error) {
	f, err := os.Open(r.path)
	if err != nil {
		return nil, fmt.Errorf("spill: opening run: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("spill: opening run: %w", err)
	}
	rr := &runReader{path: r.path, f: f, r: bufio.NewReaderSize(f, bufferSize), left: r.count, unread: st.Size()}
	count, err := rr.uvarint()
	if err == nil && count != r.count {
		err = rr.corrupt("it holds %d records, not the %d written", count, r.count)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return rr, nil
}

func (r *runReader) next() bool {
	if r.e != nil || r.done {
		return false
	}
	if r.left == 0 {
		r.done = true
		r.e = r.checkEnd()
		return false
	}
	if r.k, r.e = r.bytes(r.k); r.e != nil {
		return false
	}
	if r.v, r.e = r.bytes(r.v); r.e != nil {
		return false
	}
	r.left--
	return true
}

func (r *runReader) key() []byte   { return r.k }
func (r *runReader) value() []byte { return r.v }
func (r *runReader) err() error    { return r.e }

// bytes reads a length-prefixed key or value into buf's memory.
func (r *runReader) bytes(buf []byte) ([]byte, error) {
	n, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	if n > uint64(r.unread) {
		return nil, r.corrupt("a length of %d bytes, past the end of the file", n)
	}
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r.r, buf); err != nil {
		return nil, r.readError(err)
	}
	r.crc = crc32.Update(r.crc, castagnoli, buf)
	r.unread -= int64(n)
	return buf, nil
}

func (r *runReader) uvarint() (uint64, error) {
	x, err := binary.ReadUvarint(r.r)
	if err != nil {
		return 0, r.readError(err)
	}
	// Hashed as the writer wrote it; a varint written otherwise (never by
	// the writer) fails the checksum.
	b := binary.AppendUvarint(r.scratch[:0], x)
	r.crc = crc32.Update(r.crc, castagnoli, b)
	r.unread -= int64(len(b))
	return x, nil
}

// checkEnd reads the checksum after the last record, and the end of file.
func (r *runReader) checkEnd() error {
	var sum [4]byte
	if _, err := io.ReadFull(r.r, sum[:]); err != nil {
		return r.readError(err)
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != r.crc {
		return r.corrupt("checksum %08x, computed %08x", got, r.crc)
	}
	if _, err := r.r.ReadByte(); err != io.EOF {
		if err != nil {
			return r.readError(err)
		}
		return r.corrupt("bytes after the checksum")
	}
	return nil
}

// readError is a failed read: an I/O error as it is, anything else (an end
// of file before the end of the run, a varint that overflows) as corruption.
func (r *runReader) readError(err error) error {
	if _, ok := errors.AsType[*fs.PathError](err); ok {
		return fmt.Errorf("spill: reading run %s: %w", r.path, err)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return r.corrupt("truncated: %d records and the checksum unread", r.left)
	}
	return r.corrupt("%v", err)
}

func (r *runReader) corrupt(format string, args ...any) error {
	return fmt.Errorf("spill: run %s: %w: %s", r.path, ErrCorrupt, fmt.Sprintf(format, args...))
}
