package dedupe

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable"
)

// The journal: every batch of catalog writes carries one more row that
// lists the hashes of the keys it claims or records, so that a restart
// rebuilds the filters from a few thousand journal rows instead of a scan
// of every catalog row (see doc.go, "Restart").
//
//	dedupe#PIPELINE#~j#SS#NONCE#SEQ   one row per batch
//	k:j = h1 of each key, 8 bytes big-endian each, at the batch's latest cell time
//	dedupe#PIPELINE#~journal          the marker
//	k:since = 8 bytes, Unix ms: since when every process writing the
//	          catalog journals; one version per refresh, the largest counts
//
// SS spreads one process's journal rows over 16 places of the key space
// (SEQ mod 16), NONCE tells the processes apart. The '~' sorts after every
// bucket (00-ff), and the catalog's parse skips it: rows under
// dedupe#PIPELINE#~ are never taken for keys (an earlier version, which
// parses "~j#..." as a key, only gains a false positive).
const (
	journalMark      = "~"
	journalColumn    = "j"
	sinceColumn      = "since"
	journalShards    = 16
	journalHashBytes = 8
)

// MemberTag ends the member ID of every process of this version (app
// appends it to members.NewID): it journals its catalog writes, and its
// claims decide their keys (Commit writes no record). It ends in
// JournalTag, so that a process of the version before, which journals and
// checks for JournalTag alone, takes it for one that journals.
//
// A live peer whose ID lacks JournalTag runs a version whose writes the
// journal misses: while one is seen, the marker moves ahead, and rebuilds
// scan the catalog. One whose ID lacks MemberTag waits, as a rival, for a
// record: while one is seen, Commit writes records for every key.
const (
	MemberTag  = "+c" + JournalTag
	JournalTag = "+j1"
)

// sinceRefresh is how often Run writes the marker again, carrying its
// value forward: the family's max-age rule would otherwise collect it.
const sinceRefresh = time.Minute

// oldWriterMargin is how far past now the marker is pushed while a peer
// of an earlier version is live: such a peer may still write for about a
// membership lease after it was last seen.
const oldWriterMargin = time.Minute

// journal names the journal rows of one pipeline and numbers this
// process's batches.
type journal struct {
	prefix string // dedupe#PIPELINE#~j#
	marker string // dedupe#PIPELINE#~journal
	nonce  string
	seq    atomic.Uint64
}

func newJournal(pipelinePrefix string) *journal {
	var b [6]byte
	rand.Read(b[:])
	return &journal{
		prefix: pipelinePrefix + journalMark + "j#",
		marker: pipelinePrefix + journalMark + "journal",
		nonce:  hex.EncodeToString(b[:]),
	}
}

// nextRow returns the row key of this process's next journal row.
func (j *journal) nextRow() string {
	n := j.seq.Add(1)
	var sb strings.Builder
	sb.Grow(len(j.prefix) + 4 + len(j.nonce) + 16)
	sb.WriteString(j.prefix)
	sb.WriteByte('0')
	sb.WriteByte(hexDigits[n%journalShards])
	sb.WriteByte('#')
	sb.WriteString(j.nonce)
	sb.WriteByte('#')
	for shift := 60; shift >= 0; shift -= 4 {
		sb.WriteByte(hexDigits[n>>shift&15])
	}
	return sb.String()
}

// rows is the range of every journal row of the pipeline.
func (j *journal) rows() bigtable.RowRange { return bigtable.PrefixRange(j.prefix) }

// entry returns the journal cell of a batch: the hashes of its keys, at
// the latest time among them, so that a key rebuilt from the journal
// stays in the filters at least as long as its catalog cell counts.
func (j *journal) entry(cells []cell) cell {
	v := make([]byte, 0, journalHashBytes*len(cells))
	var at bigtable.Timestamp
	for _, c := range cells {
		v = binary.BigEndian.AppendUint64(v, c.h.h1)
		at = max(at, c.at)
	}
	return cell{row: j.nextRow(), at: at, journal: v}
}

// decodeJournal calls fn with the hashes of one journal cell.
func decodeJournal(v []byte, fn func(hashes)) {
	for ; len(v) >= journalHashBytes; v = v[journalHashBytes:] {
		h1 := binary.BigEndian.Uint64(v)
		fn(hashes{h1, mix(h1) | 1})
	}
}

// isJournalRow reports whether the part of a row key after the pipeline's
// prefix belongs to the journal (or its marker), not to a key.
func isJournalRow(rest string) bool { return strings.HasPrefix(rest, journalMark) }

// journalTrusted reports whether the journal holds every key claimed or
// recorded within the window: its marker says every writer has journaled
// for at least a window, and no peer of an earlier version is live.
func (d *Keys) journalTrusted(ctx context.Context) (bool, string, error) {
	if d.cfg.NoJournal {
		return false, "the journal is off", nil
	}
	if d.olderPeer() {
		return false, "a process of an earlier version runs", nil
	}
	since, ok, err := d.store.readSince(ctx, d.jrn.marker)
	if err != nil {
		return false, "", err
	}
	if !ok {
		return false, "no journal marker yet", nil
	}
	if start := d.now().Add(-d.cfg.Window); since.After(start) {
		return false, fmt.Sprintf("the journal is complete only since %s, less than a window", since.UTC().Format(time.RFC3339)), nil
	}
	return true, "", nil
}

// markJournal writes the marker: when it is missing, since now (this
// process journals from its first batch on); when a peer of an earlier
// version is live, since past its last possible write; otherwise its value
// again, so that it outlives the family's max-age rule.
func (d *Keys) markJournal(ctx context.Context) error {
	if d.cfg.NoJournal {
		return nil
	}
	now := d.now()
	since, ok, err := d.store.readSince(ctx, d.jrn.marker)
	if err != nil {
		return err
	}
	if !ok {
		since = now
	}
	if late := now.Add(oldWriterMargin); d.olderPeer() && late.After(since) {
		since = late
	}
	return d.store.writeSince(ctx, d.jrn.marker, since, bigtable.Time(now).TruncateToMilliseconds())
}

// rebuildFromJournal adds to the filters every key of the journal rows
// written within the window, and returns how many entries it read.
func (d *Keys) rebuildFromJournal(ctx context.Context, since bigtable.Timestamp) (int64, error) {
	a := d.newFilterAdder()
	err := d.store.journal(ctx, d.jrn.rows(), since, func(at bigtable.Timestamp, v []byte) bool {
		ns := at.Time().UnixNano()
		decodeJournal(v, func(h hashes) { a.add(h, ns) })
		return true
	})
	a.flush()
	return a.added, err
}
