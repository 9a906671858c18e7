//go:build !linux

package controller

// becomeSubreaper is Linux-only; elsewhere a harness's process group is
// all the controller ends.
func becomeSubreaper() error { return nil }

// sweep is Linux-only (it needs /proc and a subreaper).
func sweep(aid string, running func(aid string) bool, live func(pid int) bool) int { return 0 }
