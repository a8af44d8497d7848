package watermark

// idset records, for the messages of one histogram bucket, whether the
// tracker has seen each one and whether the pipeline has finished it. It is
// an open-addressing hash table of uint64 slots with linear probing: a slot
// holds a message's 64-bit ID hash with its two low bits replaced by the
// flags. Keeping the flags inside the key makes a message cost 8 bytes at
// the table's load factor (3/8 to 3/4), about 11 to 21 bytes in all, with no
// pointer for the garbage collector to scan.
//
// Two IDs whose hashes agree in their upper 62 bits would be taken for one
// message; with n messages in one bucket (one publish second of one shard)
// the chance is about n²/2⁶³, below 10⁻¹¹ for a million.
//
// Entries are never deleted: a bucket's set lives until the bucket is
// retired, and then the whole table is recycled.
type idset struct {
	slots []uint64
	n     int // slots in use
}

// Flags of a slot.
const (
	flagSeen     uint64 = 1 // the tracker received the message
	flagFinished uint64 = 2 // the pipeline finished the message
	flagMask            = flagSeen | flagFinished
)

// minSlots is the size of a new table: a quiet second of a quiet shard
// holds a few messages.
const minSlots = 8

// idKey turns a hash into a slot key: flags cleared, never zero (zero marks
// an empty slot).
func idKey(h uint64) uint64 {
	if k := h &^ flagMask; k != 0 {
		return k
	}
	return 1 << 2
}

// mark sets flag on the message whose key is k, adding it if absent, and
// returns the flags it had before (0 when it was absent).
func (s *idset) mark(k, flag uint64) (before uint64) {
	if (s.n+1)*4 > len(s.slots)*3 {
		s.grow()
	}
	mask := uint64(len(s.slots) - 1)
	for i := (k >> 2) & mask; ; i = (i + 1) & mask {
		v := s.slots[i]
		switch {
		case v == 0:
			s.slots[i] = k | flag
			s.n++
			return 0
		case v&^flagMask == k:
			s.slots[i] = v | flag
			return v & flagMask
		}
	}
}

func (s *idset) grow() {
	old := s.slots
	size := max(minSlots, 2*len(old))
	s.slots = make([]uint64, size)
	mask := uint64(size - 1)
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := (v >> 2) & mask
		for s.slots[i] != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = v
	}
}

// reset empties the set, keeping its table for reuse.
func (s *idset) reset() {
	clear(s.slots)
	s.n = 0
}

// bytes is the memory the table holds.
func (s *idset) bytes() int { return 8 * cap(s.slots) }
