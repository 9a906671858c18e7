package sqlite

// HoldApply makes stores opened from now on keep journaled events in the
// journal until release is called.
func HoldApply() (release func()) {
	holdApply = make(chan struct{})
	ch := holdApply
	return func() { close(ch); holdApply = nil }
}

// JournalSize is the event journal's length in bytes.
func JournalSize(s *Store) int64 {
	s.journal.mu.Lock()
	defer s.journal.mu.Unlock()
	return s.journal.written
}
