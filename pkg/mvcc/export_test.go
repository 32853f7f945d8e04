package mvcc

// ReadAheadHits reports how many Range requests were answered with a page
// read ahead.
func ReadAheadHits(s *Store) int64 {
	s.reads.ahead.mu.Lock()
	defer s.reads.ahead.mu.Unlock()
	return s.reads.ahead.hits
}
