package mvcc

import "context"

// roleLoop follows a shared storage's choice of the one Store that runs
// lease expiry and compaction. A Store that becomes primary does what etcd's
// new leader does: every lease gets its full TTL (the renewals the previous
// holder saw may not have reached this Store), and a compaction the
// previous holder left unfinished is walked again.
func (s *Store) roleLoop(ctx context.Context, roles <-chan bool) {
	defer s.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case primary, ok := <-roles:
			if !ok {
				s.primary.Store(false)
				return
			}
			if primary == s.primary.Load() {
				continue
			}
			if primary {
				s.lessor.promote()
			}
			s.primary.Store(primary)
			s.log.Info("role changed", "primary", primary)
			if primary {
				if _, compacted := s.Revisions(); compacted > 0 {
					s.physical.notify(compacted)
				}
			}
		}
	}
}
