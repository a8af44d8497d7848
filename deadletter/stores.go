package deadletter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The replay side of each output. Each store is used by one Replay call,
// from one goroutine.

// Pulling the replay subscription: Pub/Sub may answer a Pull with no
// messages while some remain, so the subscription counts as drained only
// after pullEmptyRounds pulls in a row brought nothing new, each waiting up
// to pullWait.
const (
	pullWait        = 3 * time.Second
	pullEmptyRounds = 2
	// replayLease is the ack deadline of the copies a replay holds: long
	// enough that copies it skips are not redelivered to it while it runs
	// (Pub/Sub's maximum).
	replayLease = 600
	// ackChunk bounds the ack IDs of one Acknowledge or ModifyAckDeadline
	// request (Pub/Sub caps a request at 512 KB).
	ackChunk = 500
)

// topicStore pulls copies from the replay subscription of a topic output.
type topicStore struct {
	log    *zap.Logger
	client *pubsub.Client
	sub    string
	// seen holds the Pub/Sub IDs of the copies returned so far; a copy
	// pulled again (its lease ran out) is not returned twice.
	seen map[string]bool
	// removed holds the copies acked; redelivered acks IDs of those are
	// acked, of the others released at the end.
	removed map[string]bool
	again   []string          // ack IDs of redeliveries to release at the end
	copyIDs map[string]string // ack ID → Pub/Sub ID of the copies returned
}

func openTopicStore(ctx context.Context, log *zap.Logger, client *pubsub.Client, sub string) (*topicStore, error) {
	_, err := client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: sub})
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("replay subscription %s does not exist (`pubsink setup` creates it on the dead-letter topic; set dead_letter.subscription to use another)", sub)
	}
	if err != nil {
		return nil, fmt.Errorf("replay subscription %s: %w", sub, err)
	}
	return &topicStore{log: log, client: client, sub: sub, seen: map[string]bool{}, removed: map[string]bool{}, copyIDs: map[string]string{}}, nil
}

func (s *topicStore) next(ctx context.Context, n int) ([]*entry, error) {
	for empty := 0; empty < pullEmptyRounds; empty++ {
		pctx, cancel := context.WithTimeout(ctx, pullWait)
		resp, err := s.client.SubscriptionAdminClient.Pull(pctx, &pubsubpb.PullRequest{Subscription: s.sub, MaxMessages: int32(n)})
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
			continue // nothing within pullWait
		case err != nil:
			return nil, fmt.Errorf("pull %s: %w", s.sub, err)
		}
		var out []*entry
		var fresh, ack []string
		for _, rm := range resp.ReceivedMessages {
			id := rm.GetMessage().GetMessageId()
			switch {
			case s.removed[id]:
				ack = append(ack, rm.AckId)
			case s.seen[id]:
				s.again = append(s.again, rm.AckId)
				fresh = append(fresh, rm.AckId)
			default:
				s.seen[id] = true
				s.copyIDs[rm.AckId] = id
				fresh = append(fresh, rm.AckId)
				c, err := copyFromAttributes(rm.Message.Data, rm.Message.Attributes)
				out = append(out, &entry{copy: c, bad: err, id: "dead-letter message " + id, ref: rm.AckId})
			}
		}
		// Hold what this replay keeps until it releases it, so that it is
		// not pulled again meanwhile.
		if err := s.modify(ctx, fresh, replayLease); err != nil {
			return nil, err
		}
		if err := s.ack(ctx, ack); err != nil {
			return nil, err
		}
		if len(out) > 0 {
			return out, nil
		}
	}
	return nil, nil
}

func (s *topicStore) remove(ctx context.Context, es []*entry) error {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.ref
		s.removed[s.copyIDs[e.ref]] = true
	}
	return s.ack(ctx, ids)
}

func (s *topicStore) release(ctx context.Context, es []*entry) error {
	ids := append([]string(nil), s.again...)
	for _, e := range es {
		ids = append(ids, e.ref)
	}
	s.again = nil
	return s.modify(ctx, ids, 0)
}

func (s *topicStore) close() error { return nil }

func (s *topicStore) ack(ctx context.Context, ids []string) error {
	for c := range chunks(ids) {
		if err := s.client.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: s.sub, AckIds: c}); err != nil {
			return fmt.Errorf("acknowledge on %s: %w", s.sub, err)
		}
	}
	return nil
}

func (s *topicStore) modify(ctx context.Context, ids []string, seconds int32) error {
	for c := range chunks(ids) {
		err := s.client.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: s.sub, AckIds: c, AckDeadlineSeconds: seconds})
		if err != nil {
			return fmt.Errorf("modify ack deadline on %s: %w", s.sub, err)
		}
	}
	return nil
}

// chunks yields ids in slices of at most ackChunk.
func chunks(ids []string) func(func([]string) bool) {
	return func(yield func([]string) bool) {
		for len(ids) > 0 {
			n := min(len(ids), ackChunk)
			if !yield(ids[:n]) {
				return
			}
			ids = ids[n:]
		}
	}
}

// tableStore reads a pipeline's rows of a table output in key order.
type tableStore struct {
	table    *bigtable.Table
	name     string
	prefix   string
	start    string // the next read starts here
	finished bool
}

func openTableStore(ctx context.Context, client *bigtable.Client, name, pipeline string) (*tableStore, error) {
	s := &tableStore{table: client.Open(name), name: name, prefix: tablePrefix(pipeline)}
	s.start = s.prefix
	_, err := s.table.ReadRow(ctx, "\x00pubsink-check\x00")
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("dead-letter table %s does not exist: %w", name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("dead-letter table %s: %w", name, err)
	}
	return s, nil
}

func (s *tableStore) next(ctx context.Context, n int) ([]*entry, error) {
	if s.finished {
		return nil, nil
	}
	var out []*entry
	// '$' follows '#': the range is every key with the prefix.
	end := s.prefix[:len(s.prefix)-1] + "$"
	err := s.table.ReadRows(ctx, bigtable.NewRange(s.start, end), func(r bigtable.Row) bool {
		c, err := copyFromRow(r)
		out = append(out, &entry{copy: c, bad: err, id: "row " + r.Key(), ref: r.Key()})
		s.start = r.Key() + "\x00"
		return true
	}, bigtable.LimitRows(int64(n)), bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if err != nil {
		return nil, fmt.Errorf("read table %s: %w", s.name, err)
	}
	if len(out) < n {
		s.finished = true
	}
	return out, nil
}

func (s *tableStore) remove(ctx context.Context, es []*entry) error {
	if len(es) == 0 {
		return nil
	}
	keys := make([]string, len(es))
	muts := make([]*bigtable.Mutation, len(es))
	for i, e := range es {
		keys[i] = e.ref
		muts[i] = bigtable.NewMutation()
		muts[i].DeleteRow()
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	errs, err := s.table.ApplyBulk(ctx, keys, muts)
	if err != nil {
		return fmt.Errorf("delete rows from %s: %w", s.name, err)
	}
	for i, e := range errs {
		if e != nil {
			return fmt.Errorf("delete row %q from %s: %w", keys[i], s.name, e)
		}
	}
	return nil
}

func (s *tableStore) release(context.Context, []*entry) error { return nil }
func (s *tableStore) close() error                            { return nil }

// fileStore reads a file output line by line. Replayed copies are marked in
// a marker file next to it (FILE.replayed, one JSON object per line), not
// removed: the daemon may be appending to the file while replay runs, and
// only appending is safe against that. Delete both files together once
// nothing in them is wanted any more.
type fileStore struct {
	path  string
	f     *os.File
	r     *bufio.Reader
	line  int
	marks map[markKey]bool
	mf    *os.File // the marker file, opened on the first remove
	// torn says the marker file ends mid-line (a failed write): the next
	// marks start on a new line.
	torn bool
}

type markKey struct{ pipeline, messageID string }

type markRecord struct {
	Pipeline   string `json:"pubsink_pipeline"`
	MessageID  string `json:"pubsink_message_id"`
	ReplayedAt string `json:"replayed_at"`
}

// markerPath is the marker file of a dead-letter file.
func markerPath(path string) string { return path + ".replayed" }

func openFileStore(path string) (*fileStore, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dead-letter file: %w", err)
	}
	s := &fileStore{path: path, f: f, r: bufio.NewReaderSize(f, 1<<20), marks: map[markKey]bool{}}
	if err := s.readMarks(); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

func (s *fileStore) readMarks() error {
	b, err := os.ReadFile(markerPath(s.path))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("replay marker file: %w", err)
	}
	s.torn = len(b) > 0 && b[len(b)-1] != '\n'
	for line := range bytes.Lines(b) {
		var m markRecord
		if json.Unmarshal(line, &m) == nil { // a torn last line marks nothing
			s.marks[markKey{m.Pipeline, m.MessageID}] = true
		}
	}
	return nil
}

func (s *fileStore) next(_ context.Context, n int) ([]*entry, error) {
	var out []*entry
	for len(out) < n {
		line, err := s.r.ReadBytes('\n')
		if err == io.EOF {
			// A last line without its newline is being written, or was torn
			// by a failed write that the next write fenced off: not a copy
			// yet either way.
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", s.path, err)
		}
		s.line++
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		c, err := copyFromLine(line)
		if err == nil && s.marks[markKey{c.Pipeline, c.MessageID}] {
			continue // replayed before
		}
		out = append(out, &entry{copy: c, bad: err, id: fmt.Sprintf("%s line %d", s.path, s.line)})
	}
	return out, nil
}

func (s *fileStore) remove(_ context.Context, es []*entry) error {
	if len(es) == 0 {
		return nil
	}
	if s.mf == nil {
		path := markerPath(s.path)
		_, statErr := os.Stat(path)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		if errors.Is(statErr, os.ErrNotExist) {
			if err := syncDir(filepath.Dir(path)); err != nil {
				f.Close()
				return err
			}
		}
		s.mf = f
	}
	var buf []byte
	if s.torn {
		buf = append(buf, '\n')
	}
	now := formatTime(time.Now())
	for _, e := range es {
		b, _ := json.Marshal(markRecord{Pipeline: e.copy.Pipeline, MessageID: e.copy.MessageID, ReplayedAt: now})
		buf = append(append(buf, b...), '\n')
		s.marks[markKey{e.copy.Pipeline, e.copy.MessageID}] = true
	}
	if _, err := s.mf.Write(buf); err != nil {
		s.torn = true
		return err
	}
	s.torn = false
	return s.mf.Sync()
}

func (s *fileStore) release(context.Context, []*entry) error { return nil }

func (s *fileStore) close() error {
	var err error
	if s.mf != nil {
		err = s.mf.Close()
	}
	return errors.Join(s.f.Close(), err)
}
