package test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// smallDisk is a filesystem of the test's own, small enough to fill: a
// size-limited tmpfs mounted on a fresh directory, unmounted when the test
// ends. Filling it is real ENOSPC from the kernel, at whatever write of
// kite's or the database's hits it first.
type smallDisk struct {
	Dir string
}

// newSmallDisk mounts a tmpfs of sizeMiB. Mounting needs root: without it
// the test is skipped, except under CI=true (where .ci/run runs as root),
// where it fails.
func newSmallDisk(t *testing.T, sizeMiB int) *smallDisk {
	t.Helper()
	// Not t.TempDir, whose parent only root may enter: a Postgres on the
	// disk runs as the postgres user, and the mount's own root is 0755.
	dir, err := os.MkdirTemp("", "kite-smalldisk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) }) // last, once unmounted
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dm,mode=0755", sizeMiB)); err != nil {
		msg := fmt.Sprintf("mount a %d MiB tmpfs (needs root): %v", sizeMiB, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		// Lazy: a child that the test killed may still be exiting.
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return &smallDisk{Dir: dir}
}

// free is the space left on the disk, in bytes.
func (d *smallDisk) free(t *testing.T) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.Dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// fill writes a filler file until only leave bytes are free.
func (d *smallDisk) fill(t *testing.T, leave int64) {
	t.Helper()
	n := d.free(t) - leave
	if n <= 0 {
		return
	}
	f, err := os.Create(d.filler())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for n > 0 {
		m := min(n, int64(len(buf)))
		if _, err := f.Write(buf[:m]); err != nil {
			t.Fatalf("fill the disk: %v", err)
		}
		n -= m
	}
}

// release removes the filler: the space is back at once.
func (d *smallDisk) release(t *testing.T) {
	t.Helper()
	if err := os.Remove(d.filler()); err != nil {
		t.Fatalf("free the disk: %v", err)
	}
}

func (d *smallDisk) filler() string { return filepath.Join(d.Dir, "filler") }
