package proxy

import (
	"context"
	"net/http"
	"strconv"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/internal/fastjson"
)

// TokenCounter is implemented by backends that can count the prompt tokens
// of a conversation (TokenBackend does); it serves Anthropic's
// /v1/messages/count_tokens and the Gemini API's :countTokens.
type TokenCounter interface {
	CountTokens(ctx context.Context, conv chat.Conversation) (int, error)
}

// serveCountTokens answers Anthropic's POST /v1/messages/count_tokens
// ({"input_tokens":N}) or the Gemini API's POST …:countTokens
// ({"totalTokens":N}), as sh says.
func (p *Proxy) serveCountTokens(w http.ResponseWriter, r *http.Request, t Target, sh *apiShape) {
	if r.Method != http.MethodPost {
		writeError(w, sh.style, &apiError{Status: http.StatusMethodNotAllowed, Message: "use POST"})
		return
	}
	tc, ok := p.backend.(TokenCounter)
	if !ok {
		writeError(w, sh.style, &apiError{Status: http.StatusNotFound, Message: "counting tokens is not supported by this model backend"})
		return
	}
	mode, aerr := p.authorize(r.Context(), r, t, false)
	if aerr != nil {
		writeError(w, sh.style, aerr)
		return
	}
	c := &call{shape: sh, target: t, mode: mode, countOnly: true, header: r.Header}
	if c.body, aerr = p.readBody(w, r); aerr != nil {
		writeError(w, sh.style, aerr)
		return
	}
	if sh.prepare != nil {
		if aerr = sh.prepare(c, r); aerr != nil {
			writeError(w, sh.style, aerr)
			return
		}
	}
	if aerr = sh.decode(p, c); aerr != nil {
		writeError(w, sh.style, aerr)
		return
	}
	n, err := tc.CountTokens(r.Context(), c.chat.Conv)
	if err != nil {
		writeError(w, sh.style, backendError(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	field := `{"input_tokens":`
	if sh == shapeGemini {
		field = `{"totalTokens":`
	}
	w.Write(strconv.AppendInt([]byte(field), int64(n), 10))
	w.Write([]byte("}"))
}

// serveModels answers GET /v1/models in OpenAI's or (with an
// anthropic-version header) Anthropic's list shape.
func (p *Proxy) serveModels(w http.ResponseWriter, r *http.Request, t Target) {
	style := styleOpenAI
	anth := r.Header.Get("anthropic-version") != ""
	if anth {
		style = styleAnthropic
	}
	if r.Method != http.MethodGet {
		writeError(w, style, &apiError{Status: http.StatusMethodNotAllowed, Message: "use GET"})
		return
	}
	mode, aerr := p.authorize(r.Context(), r, t, false)
	if aerr != nil {
		writeError(w, style, aerr)
		return
	}
	name := p.overrides(mode).Model
	if name == "" {
		name = p.backend.ModelName()
	}
	var b []byte
	if anth {
		b = append(b, `{"data":[{"type":"model","id":`...)
		b = fastjson.AppendString(b, name)
		b = append(b, `,"display_name":`...)
		b = fastjson.AppendString(b, name)
		b = append(b, `,"created_at":"1970-01-01T00:00:00Z"}],"has_more":false,"first_id":`...)
		b = fastjson.AppendString(b, name)
		b = append(b, `,"last_id":`...)
		b = fastjson.AppendString(b, name)
		b = append(b, '}')
	} else {
		b = append(b, `{"object":"list","data":[{"id":`...)
		b = fastjson.AppendString(b, name)
		b = append(b, `,"object":"model","created":0,"owned_by":"agl"}]}`...)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}
