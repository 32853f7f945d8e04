package mvcc

// watcherGroup indexes the synced watchers by what they watch, so publish
// finds the watchers of a changed key without visiting every watcher: one
// map lookup for single-key watchers (the common etcdctl and election
// shape), and one test per distinct range (kube-apiserver opens one prefix
// watch per resource, often several with the same prefix).
type watcherGroup struct {
	keys map[string]map[*watcher]struct{}
	// ranges holds one entry per distinct (key, end); byRange finds it.
	ranges  []*rangeWatchers
	byRange map[string]*rangeWatchers
}

type rangeWatchers struct {
	probe    *watcher // any member: they all share key and end
	watchers map[*watcher]struct{}
}

func newWatcherGroup() *watcherGroup {
	return &watcherGroup{
		keys:    make(map[string]map[*watcher]struct{}),
		byRange: make(map[string]*rangeWatchers),
	}
}

// rangeID names a range unambiguously: the key length prefix keeps
// ("a", "bc") and ("ab", "c") apart, and a from-key watch (end empty) apart
// from a single key (which never gets here).
func rangeID(w *watcher) string {
	n := len(w.key)
	return string([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}) + string(w.key) + string(w.end)
}

func (g *watcherGroup) add(w *watcher) {
	if w.end == nil {
		set := g.keys[string(w.key)]
		if set == nil {
			set = make(map[*watcher]struct{})
			g.keys[string(w.key)] = set
		}
		set[w] = struct{}{}
		return
	}
	id := rangeID(w)
	rw := g.byRange[id]
	if rw == nil {
		rw = &rangeWatchers{probe: w, watchers: make(map[*watcher]struct{})}
		g.byRange[id] = rw
		g.ranges = append(g.ranges, rw)
	}
	rw.watchers[w] = struct{}{}
}

func (g *watcherGroup) delete(w *watcher) {
	if w.end == nil {
		set := g.keys[string(w.key)]
		delete(set, w)
		if len(set) == 0 {
			delete(g.keys, string(w.key))
		}
		return
	}
	id := rangeID(w)
	rw := g.byRange[id]
	if rw == nil {
		return
	}
	delete(rw.watchers, w)
	if len(rw.watchers) > 0 {
		if rw.probe == w {
			for other := range rw.watchers {
				rw.probe = other
				break
			}
		}
		return
	}
	delete(g.byRange, id)
	for i, r := range g.ranges {
		if r == rw {
			last := len(g.ranges) - 1
			g.ranges[i] = g.ranges[last]
			g.ranges[last] = nil
			g.ranges = g.ranges[:last]
			break
		}
	}
}

// each calls fn for every watcher whose range holds key.
func (g *watcherGroup) each(key []byte, fn func(*watcher)) {
	for w := range g.keys[string(key)] {
		fn(w)
	}
	for _, rw := range g.ranges {
		if rw.probe.contains(key) {
			for w := range rw.watchers {
				fn(w)
			}
		}
	}
}
