package mvcc

// NewWatchStream opens the watch side of one gRPC Watch stream. Close it when
// the gRPC stream ends; Store.Close closes it too.
func (s *Store) NewWatchStream() *WatchStream { return s.hub.newStream() }
