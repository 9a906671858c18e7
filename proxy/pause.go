package proxy

import (
	"context"
)

// Pause makes new model calls fail with 503 and Retry-After; calls in
// flight finish. Events routes stay open.
func (p *Proxy) Pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

// Resume accepts model calls again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.paused = false
	p.mu.Unlock()
}

// Drain waits until no model call is in flight (pause first, or new calls
// may keep it busy) or ctx ends.
func (p *Proxy) Drain(ctx context.Context) error {
	p.mu.Lock()
	if p.inflight == 0 {
		p.mu.Unlock()
		return nil
	}
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	ch := p.idle
	p.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Status reports whether the proxy is paused and how many calls are in flight.
func (p *Proxy) Status() (paused bool, inflight int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.inflight
}

func (p *Proxy) admit() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		return false
	}
	p.inflight++
	return true
}

func (p *Proxy) release() {
	p.mu.Lock()
	p.inflight--
	if p.inflight == 0 && p.idle != nil {
		close(p.idle)
		p.idle = nil
	}
	p.mu.Unlock()
}
