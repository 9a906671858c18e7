package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/internal/testutil"
)

// TestGatewayLimitsFromConfig: `agl gateway` applies the gateway section's
// client limits: connections over max_conns_per_ip get a 503 in the JSON
// error shape, a connection that sends nothing is cut after
// read_header_timeout, an unauthenticated request is answered without
// waiting for its declared body.
func TestGatewayLimitsFromConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildAgl()
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "agl.yaml")
	os.WriteFile(cfg, []byte("gateway:\n  read_header_timeout: 300ms\n  read_body_timeout: 5s\n  idle_timeout: 30s\n  max_conns_per_ip: 3\n"), 0o644)
	addr := testutil.FreeAddr(t)
	gw := startGateway(t, bin, t.TempDir(), addr, "--config", cfg)
	defer func() { gw.Process.Kill(); gw.Wait() }()

	request := func(c net.Conn, raw string) (*http.Response, []byte) {
		t.Helper()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
		if resp, body := request(c, "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("held connection: %d %s", resp.StatusCode, body)
		}
	}
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	resp, body := request(over, "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
	over.Close()
	var e api.ErrorBody
	if resp.StatusCode != 503 || json.Unmarshal(body, &e) != nil || e.Error.Code != "too_many_connections" {
		t.Fatalf("over max_conns_per_ip: %d %s", resp.StatusCode, body)
	}
	for _, c := range held {
		c.Close()
	}
	// The slots free as the gateway notices the closes.
	var silent net.Conn
	for deadline := time.Now().Add(5 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		resp, _ := request(c, "POST /api/rollouts HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
		if resp.StatusCode == 401 {
			c.Close()
			if silent, err = net.Dial("tcp", addr); err != nil {
				t.Fatal(err)
			}
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("unauthenticated request with an unsent body: %d", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer silent.Close()
	start := time.Now()
	silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, silent); err != nil {
		t.Fatalf("silent connection not closed: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("silent connection cut after %s, read_header_timeout 300ms", d)
	}
}
