package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/kite-db/kite/internal/testenv"
)

// printTable writes the results, their ratios to each row's reference
// (reference) and the storage requests kube-apiserver made.
func printTable(w io.Writer, cfg *config, results []result) {
	fmt.Fprintf(w, "\nkube-apiserver 1.37 on each storage: %d ConfigMaps (%d B of padding) by %d workers; watch %.0f updates/s for %s over %d objects; restart over %d ConfigMaps",
		cfg.objects, cfg.valueSize, cfg.workers, cfg.watchRate, cfg.watchDuration, cfg.watchObjects, cfg.restartObjects)
	if len(cfg.kiteFlags) > 0 {
		fmt.Fprintf(w, "; kite flags %s", strings.Join(cfg.kiteFlags, " "))
	}
	fmt.Fprintln(w)
	tw := testenv.NewTable(w)
	tw.Rowf("storage\tcreate/s\tp50/p99 ms\tupdate/s\tp50/p99 ms\tdelete/s\tp50/p99 ms\tfill/s\twatch p50/p99 ms\tmissed\tready s\tlisted s\tcpu s\tpeak MiB\tapi cpu s\terrors")
	for _, r := range results {
		errs := r.Create.Errors + r.Update.Errors + r.Delete.Errors + r.Watch.Errors + r.Restart.Load.Errors
		note := fmt.Sprint(errs)
		if r.Error != "" {
			note += " (failed)"
		}
		tw.Rowf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f/%.1f\t%d\t%.1f\t%.1f\t%.1f\t%d\t%.1f\t%s", r.Storage,
			r.Create.rate(), r.Create.lat(), r.Update.rate(), r.Update.lat(), r.Delete.rate(), r.Delete.lat(), r.Restart.Load.rate(),
			r.Watch.P50ms, r.Watch.P99ms, r.Watch.Missed, r.Restart.ReadySeconds, r.Restart.ListSeconds,
			r.StorageCPU, r.StoragePeakRSS>>20, r.APIServerCPU, note)
	}
	tw.Flush()

	byName := map[string]result{}
	have := map[string]bool{}
	for _, r := range results {
		if r.Error == "" {
			byName[r.Storage], have[r.Storage] = r, true
		}
	}
	var ratios [][]string
	for _, r := range results {
		ref := reference(r.Storage, have)
		b, ok := byName[ref]
		if !ok || r.Error != "" {
			continue
		}
		ratio := testenv.Ratio
		ratios = append(ratios, []string{r.Storage, ref,
			ratio(r.Create.PerSecond, b.Create.PerSecond), ratio(r.Update.PerSecond, b.Update.PerSecond),
			ratio(r.Delete.PerSecond, b.Delete.PerSecond), ratio(r.Watch.P99ms, b.Watch.P99ms),
			ratio(r.Restart.ReadySeconds, b.Restart.ReadySeconds), ratio(r.StorageCPU, b.StorageCPU),
			ratio(float64(r.StoragePeakRSS), float64(b.StoragePeakRSS))})
	}
	if len(ratios) > 0 {
		fmt.Fprintln(w, "\nratios to the reference row (rates: above 1 is faster; watch p99, ready, cpu, memory: below 1 is better)")
		tw = testenv.NewTable(w)
		tw.Rowf("storage\tvs\tcreate/s\tupdate/s\tdelete/s\twatch p99\tready\tcpu\tpeak mem")
		for _, row := range ratios {
			tw.Row(row...)
		}
		tw.Flush()
	}

	ops := map[string]bool{}
	for _, r := range results {
		for op := range r.Requests {
			ops[op] = true
		}
	}
	if len(ops) == 0 {
		return
	}
	names := make([]string, 0, len(ops))
	for op := range ops {
		names = append(names, op)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "\nrequests kube-apiserver sent to storage (etcd_requests_total, both kube-apiserver processes), all resources / configmaps")
	tw = testenv.NewTable(w)
	tw.Row(append([]string{"storage"}, names...)...)
	for _, r := range results {
		row := []string{r.Storage}
		for _, op := range names {
			row = append(row, fmt.Sprintf("%.0f/%.0f", r.Requests[op], r.ConfigMapRequests[op]))
		}
		tw.Row(row...)
	}
	tw.Flush()

	fmt.Fprintln(w, "\nconfigmap requests to storage by phase")
	tw = testenv.NewTable(w)
	tw.Row(append([]string{"storage", "phase"}, names...)...)
	for _, r := range results {
		for _, ph := range []string{"create", "update", "delete", "watch", "fill", "restart"} {
			c, ok := r.PhaseRequests[ph]
			if !ok {
				continue
			}
			row := []string{r.Storage, ph}
			for _, op := range names {
				row = append(row, fmt.Sprintf("%.0f", c[op]))
			}
			tw.Row(row...)
		}
	}
	tw.Flush()
}
