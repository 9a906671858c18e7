package proxy

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/internal/fastjson"
	"github.com/aglrl/agl/store"
)

// appendModelCall appends mc as JSON, exactly as json.Marshal would shape
// it (same keys, same omitempty rules), without reflection and without
// re-validating Request/Response/Sampling: the gateway produced or already
// parsed them, so they are known to be valid JSON. promptJSON, when not
// nil, stands for mc.PromptIDs: the ids as encoding/json writes them. lay,
// when not nil, is set to where the values the store's encoding cuts out
// are (store.CallLayout), so that the store does not look for them. It is
// on every call's hot path.
func appendModelCall(b []byte, mc *api.ModelCall, promptJSON []byte, lay *store.CallLayout) []byte {
	var lo store.CallLayout
	lo.Agent = mc.Agent
	b = append(b, `{"call_id":`...)
	b = fastjson.AppendString(b, mc.CallID)
	b = append(b, `,"api":`...)
	b = fastjson.AppendString(b, mc.API)
	b = append(b, `,"model":`...)
	b = fastjson.AppendString(b, mc.Model)
	b = append(b, `,"model_version":`...)
	b = strconv.AppendInt(b, mc.ModelVersion, 10)
	if mc.Agent != "" {
		b = append(b, `,"agent":`...)
		b = fastjson.AppendString(b, mc.Agent)
	}
	switch {
	case promptJSON != nil:
		if len(promptJSON) > len("[]") {
			b = append(b, `,"prompt_ids":`...)
			lo.PromptIDs[0] = len(b)
			b = append(b, promptJSON...)
			lo.PromptIDs[1] = len(b)
		}
	case len(mc.PromptIDs) > 0:
		b = append(b, `,"prompt_ids":`...)
		lo.PromptIDs[0] = len(b)
		b = fastjson.AppendInt32s(b, mc.PromptIDs)
		lo.PromptIDs[1] = len(b)
	}
	if len(mc.ResponseIDs) > 0 {
		b = append(b, `,"response_ids":`...)
		lo.ResponseIDs[0] = len(b)
		b = fastjson.AppendInt32s(b, mc.ResponseIDs)
		lo.ResponseIDs[1] = len(b)
	}
	if len(mc.ResponseLogprobs) > 0 {
		b = append(b, `,"response_logprobs":[`...)
		for i, f := range mc.ResponseLogprobs {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendFloat32(b, f)
		}
		b = append(b, ']')
	}
	if mc.NoTokenIDs {
		b = append(b, `,"no_token_ids":true`...)
	}
	if mc.FinishReason != "" {
		b = append(b, `,"finish_reason":`...)
		b = fastjson.AppendString(b, mc.FinishReason)
	}
	b = append(b, `,"continued":`...)
	b = strconv.AppendBool(b, mc.Continued)
	if mc.RenderReason != "" {
		b = append(b, `,"render_reason":`...)
		b = fastjson.AppendString(b, mc.RenderReason)
	}
	if mc.UpstreamRendered {
		b = append(b, `,"upstream_rendered":true`...)
	}
	for _, f := range [...]struct {
		key string
		raw json.RawMessage
	}{{`,"sampling":`, mc.Sampling}, {`,"request":`, mc.Request}, {`,"response":`, mc.Response}} {
		if len(f.raw) > 0 {
			b = append(b, f.key...)
			if f.key == `,"request":` {
				// The value, without the white space around it.
				lead := len(f.raw) - len(bytes.TrimLeft(f.raw, " \t\r\n"))
				trail := len(f.raw) - len(bytes.TrimRight(f.raw, " \t\r\n"))
				lo.Request = [2]int{len(b) + lead, len(b) + len(f.raw) - trail}
			}
			b = append(b, f.raw...)
		}
	}
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(mc.Usage.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(mc.Usage.CompletionTokens), 10)
	b = append(b, `},"latency_ms":`...)
	b = strconv.AppendFloat(b, mc.LatencyMS, 'f', -1, 64)
	if mc.Retries != 0 {
		b = append(b, `,"retries":`...)
		b = strconv.AppendInt(b, int64(mc.Retries), 10)
	}
	if mc.Stream {
		b = append(b, `,"stream":true`...)
	}
	if len(mc.Ignored) > 0 {
		b = append(b, `,"ignored":[`...)
		for i, s := range mc.Ignored {
			if i > 0 {
				b = append(b, ',')
			}
			b = fastjson.AppendString(b, s)
		}
		b = append(b, ']')
	}
	if mc.Status != "" {
		b = append(b, `,"status":`...)
		b = fastjson.AppendString(b, mc.Status)
	}
	if mc.HTTPStatus != 0 {
		b = append(b, `,"http_status":`...)
		b = strconv.AppendInt(b, int64(mc.HTTPStatus), 10)
	}
	if mc.Error != "" {
		b = append(b, `,"error":`...)
		b = fastjson.AppendString(b, mc.Error)
	}
	if lay != nil {
		*lay = lo
	}
	return append(b, '}')
}

// appendFloat32 writes f as a JSON number. JSON has no infinities or NaN;
// a log-prob of -Inf (an impossible token) is written as the lowest
// float32 so that the event still records the call.
func appendFloat32(b []byte, f float32) []byte {
	switch {
	case math.IsNaN(float64(f)):
		f = 0
	case math.IsInf(float64(f), -1):
		f = -math.MaxFloat32
	case math.IsInf(float64(f), 1):
		f = math.MaxFloat32
	}
	return strconv.AppendFloat(b, float64(f), 'g', -1, 32)
}

// appendSampling writes s as json.Marshal would.
func appendSampling(b []byte, s *engine.Sampling) []byte {
	b = append(b, `{"temperature":`...)
	b = appendFloat32(b, s.Temperature)
	if s.TopP != 0 {
		b = append(b, `,"top_p":`...)
		b = appendFloat32(b, s.TopP)
	}
	if s.TopK != 0 {
		b = append(b, `,"top_k":`...)
		b = strconv.AppendInt(b, int64(s.TopK), 10)
	}
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, int64(s.MaxTokens), 10)
	if len(s.StopIDs) > 0 {
		b = append(b, `,"stop_ids":`...)
		b = fastjson.AppendInt32s(b, s.StopIDs)
	}
	if s.Seed != 0 {
		b = append(b, `,"seed":`...)
		b = strconv.AppendUint(b, s.Seed, 10)
	}
	return append(b, '}')
}
