package mvcc

// ReadAheadHits reports how many Range requests were answered with a page
// read ahead.
func ReadAheadHits(s *Store) int64 {
	s.readAhead.mu.Lock()
	defer s.readAhead.mu.Unlock()
	return s.readAhead.hits
}
