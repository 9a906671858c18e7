package proxy

import (
	"net/http"
	"time"
)

func setSSEHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
}

// keepAlive sends SSE comments on a stream while its answer is computed.
type keepAlive struct {
	done    chan struct{}
	exited  chan struct{}
	started bool // the stream's headers were sent; read after exited
}

func startKeepAlive(w http.ResponseWriter, every time.Duration) *keepAlive {
	k := &keepAlive{done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(k.exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-k.done:
				return
			case <-t.C:
				if !k.started {
					setSSEHeaders(w.Header())
					w.WriteHeader(http.StatusOK)
					k.started = true
				}
				w.Write([]byte(": keep-alive\n\n"))
				if f, ok := w.(http.Flusher); ok {
					f.Flush()
				}
			}
		}
	}()
	return k
}

// stop ends the keep-alives (once; nil-safe) and reports whether the
// stream was started.
func (k *keepAlive) stop() bool {
	if k == nil {
		return false
	}
	select {
	case <-k.exited:
	default:
		close(k.done)
		<-k.exited
	}
	return k.started
}
