package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"go.etcd.io/etcd/api/v3/version"
)

// kiteVersion is the module version stamped by `go install`, or "dev".
func kiteVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func runVersion(args []string) int {
	if len(args) > 0 {
		return fatalf("version takes no arguments")
	}
	fmt.Printf("kite Version: %s\n", kiteVersion())
	fmt.Printf("etcd API Version: %s\n", version.Version)
	fmt.Printf("Go Version: %s\n", runtime.Version())
	fmt.Printf("Go OS/Arch: %s/%s\n", runtime.GOOS, runtime.GOARCH)
	return 0
}
