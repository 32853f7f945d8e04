package mvcc

// ringMap is a map bounded to size entries: once full, each new key takes
// the place of the oldest one. It is not safe for concurrent use; its
// owners lock around it.
type ringMap[V any] struct {
	size  int
	m     map[string]V
	order []string // insertion order
	next  int      // slot of order to overwrite next once full
}

func newRingMap[V any](size int) *ringMap[V] {
	return &ringMap[V]{size: size, m: make(map[string]V, size)}
}

func (r *ringMap[V]) get(k string) (V, bool) {
	v, ok := r.m[k]
	return v, ok
}

// set stores v under k, replacing a value already there in place.
func (r *ringMap[V]) set(k string, v V) {
	if _, ok := r.m[k]; !ok {
		if len(r.order) < r.size {
			r.order = append(r.order, k)
		} else {
			delete(r.m, r.order[r.next])
			r.order[r.next] = k
			r.next = (r.next + 1) % r.size
		}
	}
	r.m[k] = v
}
