package server

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// snapshotChunkBytes is the blob size of one snapshot message (etcd's
// snapshotSendBufferSize: several OS pages).
const snapshotChunkBytes = 32 * 1024

// Snapshot streams a consistent copy of the database, then one more message
// whose blob is the sha256 of everything sent before, exactly as etcd does:
// `etcdctl snapshot save` requires (size % 512) == 32 and restore checks the
// digest.
//
// Every message announces RemainingBytes, so the backend hands over its copy
// with its size before the first message goes out.
func (s *maintenanceServer) Snapshot(r *pb.SnapshotRequest, stream pb.Maintenance_SnapshotServer) error {
	ctx := stream.Context()
	f, total, err := s.store.Backend().Snapshot(ctx)
	if err != nil {
		return toGRPCError(fmt.Errorf("write snapshot: %w", err))
	}
	defer func() {
		if err := f.Close(); err != nil {
			s.log.WarnContext(ctx, "failed to release snapshot copy", "error", err)
		}
	}()

	start := time.Now()
	s.log.InfoContext(ctx, "sending database snapshot to client", "total-bytes", total, "storage-version", storageVersion())
	h := sha256.New()
	var sent int64
	for sent < total {
		// A new buffer per message: Send may keep a reference until the
		// message is encoded.
		buf := make([]byte, min(snapshotChunkBytes, total-sent))
		n, err := io.ReadFull(f, buf)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return toGRPCError(fmt.Errorf("read snapshot: %w", err))
		}
		if n == 0 {
			return toGRPCError(fmt.Errorf("read snapshot: file shrank at %d of %d bytes", sent, total))
		}
		sent += int64(n)
		h.Write(buf[:n])
		// Like etcd's, the messages carry no header.
		resp := &pb.SnapshotResponse{RemainingBytes: uint64(total - sent), Blob: buf[:n], Version: storageVersion()}
		if err := stream.Send(resp); err != nil {
			return toGRPCError(err)
		}
	}
	sum := &pb.SnapshotResponse{RemainingBytes: 0, Blob: h.Sum(nil), Version: storageVersion()}
	if err := stream.Send(sum); err != nil {
		return toGRPCError(err)
	}
	s.log.InfoContext(ctx, "sent database snapshot to client", "total-bytes", total, "took", time.Since(start))
	return nil
}
