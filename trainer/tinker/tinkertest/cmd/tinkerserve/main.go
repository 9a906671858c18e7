// Command tinkerserve runs the Tinker stand-in (tinkertest) on loopback
// with an embedded model directory as its base model, for end-to-end
// runs of `agl train` with a tinker policy (examples/calc/tinker.sh):
//
//	TINKER_API_KEY=… tinkerserve --model DIR [--url-file FILE]
//
// It prints the service's URL (and writes it to --url-file) and serves
// until interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/aglrl/agl/trainer/tinker/tinkertest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tinkerserve:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("model", "", "embedded model directory served as the base model (required)")
	urlFile := flag.String("url-file", "", "write the service's URL to this file")
	keyEnv := flag.String("key-env", "TINKER_API_KEY", "environment variable holding the API key the service accepts")
	flag.Parse()
	if *dir == "" || flag.NArg() > 0 {
		return errors.New("usage: tinkerserve --model DIR [--url-file FILE] [--key-env VAR]")
	}
	key := os.Getenv(*keyEnv)
	if key == "" {
		return fmt.Errorf("%s is not set", *keyEnv)
	}
	s, err := tinkertest.NewTransformer(key, *dir)
	if err != nil {
		return err
	}
	defer s.Close()
	if *urlFile != "" {
		if err := os.WriteFile(*urlFile, []byte(s.URL+"\n"), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("tinkerserve: %s at %s\n", *dir, s.URL)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	if bad := s.MalformedRequests(); len(bad) > 0 {
		return fmt.Errorf("refused %d malformed requests, first: %s", len(bad), bad[0])
	}
	fmt.Printf("tinkerserve: served %d forward_backward, %d optim_step, %d sample calls\n",
		s.Count("/api/v1/forward_backward"), s.Count("/api/v1/optim_step"), s.Count("/api/v1/asample"))
	return nil
}
