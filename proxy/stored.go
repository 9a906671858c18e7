package proxy

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/store"
)

// StateSource supplies the token state of calls a TokenBackend did not
// serve itself: another gateway replica served them, or this process
// before a restart. The backend consults it only when a conversation
// holds a generated reply its own state does not cover.
type StateSource interface {
	// RecentCalls returns up to limit of the latest calls of t's attempt
	// and agent whose reply ended with a stop, newest first.
	RecentCalls(ctx context.Context, t Target, limit int) ([]StoredCall, error)
}

// StoredCall is one recorded call as token state: the conversation its
// request held and the exact ids of its prompt and reply.
type StoredCall struct {
	Conv        chat.Conversation
	PromptIDs   []int32
	ResponseIDs []int32
}

// stateSourced is a backend that takes a StateSource (TokenBackend, and
// AgentRouter for the backends behind it).
type stateSourced interface {
	useStateSource(StateSource)
}

// storedCallsScanned bounds the model_request events RecentCalls reads:
// the latest of the attempt, whatever their agent.
const storedCallsScanned = 32

// RecentCalls implements StateSource over the proxy's store: the latest
// model_request events of the attempt, their requests decoded as the
// route that recorded them decodes a request.
func (p *Proxy) RecentCalls(ctx context.Context, t Target, limit int) ([]StoredCall, error) {
	evs, err := p.st.ListEvents(ctx, store.EventFilter{RolloutID: t.RolloutID, AttemptID: t.AttemptID,
		Types: []string{store.EventModelRequest}, Desc: true, Limit: storedCallsScanned})
	if err != nil {
		return nil, fmt.Errorf("stored calls of %s/%s: %w", t.RolloutID, t.AttemptID, err)
	}
	var out []StoredCall
	for _, e := range evs {
		if len(out) == limit {
			break
		}
		var mc api.ModelCall
		if json.Unmarshal(e.Data, &mc) != nil || mc.Agent != t.Agent || mc.FinishReason != engine.FinishStop && mc.FinishReason != api.FinishToolCalls ||
			mc.UpstreamRendered || mc.NoTokenIDs || len(mc.ResponseIDs) == 0 {
			continue
		}
		var sh *apiShape
		switch mc.API {
		case shapeChat.name:
			sh = shapeChat
		case shapeResponses.name:
			sh = shapeResponses
		case shapeMessages.name:
			sh = shapeMessages
		case shapeGemini.name:
			sh = shapeGemini
		default:
			continue // raw completions keep no token state
		}
		c := &call{shape: sh, target: t, mode: store.ModeTrain, body: mc.Request}
		if sh.decode(p, c) != nil || c.chat == nil {
			continue
		}
		out = append(out, StoredCall{Conv: c.chat.Conv, PromptIDs: mc.PromptIDs, ResponseIDs: mc.ResponseIDs})
	}
	return out, nil
}
