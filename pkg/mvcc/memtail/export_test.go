package memtail

// WithoutValue is withoutValue, for the tests' expected rows.
var WithoutValue = withoutValue

// RowCacheValueBytes is the bytes of values b's row cache holds, read
// under the writer lock.
func RowCacheValueBytes(b *Backend) int64 {
	b.writeSem <- struct{}{}
	defer b.unlockWriter()
	var n int64
	for _, e := range b.rows.m {
		if e.kv != nil {
			n += int64(len(e.kv.Value))
		}
	}
	return n
}
