package proxy

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aglrl/agl/chat"
)

// AgentRouter is a Backend that answers each call with the backend of the
// policy its agent maps to (multi-agent harnesses: a trained, a frozen and
// an upstream policy side by side). A call of an agent mapped to no
// backend is refused as a bad request naming the agent.
type AgentRouter struct {
	byAgent map[string]Backend
	// def answers ModelName and count_tokens; the first backend given.
	def Backend
}

// NewAgentRouter routes agent → backend (agent "" is the default agent).
// def names the agent whose backend answers ModelName and count_tokens.
func NewAgentRouter(byAgent map[string]Backend, def string) (*AgentRouter, error) {
	b, ok := byAgent[def]
	if !ok {
		return nil, fmt.Errorf("proxy: agent router: agent %q has no backend", def)
	}
	return &AgentRouter{byAgent: byAgent, def: b}, nil
}

func (r *AgentRouter) route(t Target) (Backend, error) {
	b, ok := r.byAgent[t.Agent]
	if !ok {
		name := "the default agent (no agents/{agent} path segment, " + AgentHeader + " header or proxy.agents entry)"
		if t.Agent != "" {
			name = "agent " + strconv.Quote(t.Agent)
		}
		return nil, fmt.Errorf("%w: %s is mapped to no policy", ErrBadRequest, name)
	}
	return b, nil
}

// useStateSource gives s to the backends that take one.
func (r *AgentRouter) useStateSource(s StateSource) {
	for _, b := range r.byAgent {
		if sb, ok := b.(stateSourced); ok {
			sb.useStateSource(s)
		}
	}
}

// Chat implements Backend.
func (r *AgentRouter) Chat(ctx context.Context, req *ChatRequest) (*Result, error) {
	b, err := r.route(req.Target)
	if err != nil {
		return nil, err
	}
	res, err := b.Chat(ctx, req)
	if err == nil && res.Model == "" {
		res.Model = b.ModelName()
	}
	return res, err
}

// Complete implements Backend.
func (r *AgentRouter) Complete(ctx context.Context, req *CompleteRequest) (*Result, error) {
	b, err := r.route(req.Target)
	if err != nil {
		return nil, err
	}
	res, err := b.Complete(ctx, req)
	if err == nil && res.Model == "" {
		res.Model = b.ModelName()
	}
	return res, err
}

// ModelName implements Backend: the default backend's.
func (r *AgentRouter) ModelName() string { return r.def.ModelName() }

// CountTokens implements TokenCounter with the default backend, when it
// counts tokens.
func (r *AgentRouter) CountTokens(ctx context.Context, conv chat.Conversation) (int, error) {
	tc, ok := r.def.(TokenCounter)
	if !ok {
		return 0, fmt.Errorf("%w: count_tokens is not supported by this model backend", ErrUnsupported)
	}
	return tc.CountTokens(ctx, conv)
}
