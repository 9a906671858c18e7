package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/internal/fastjson"
	"github.com/aglrl/agl/llmapi"
)

// The Gemini API (generativelanguage.googleapis.com v1beta) ⇄
// chat.Conversation, as the @google/genai SDK and Gemini CLI speak it:
//
//	POST …/v1beta/models/{model}:generateContent
//	POST …/v1beta/models/{model}:streamGenerateContent[?alt=sse]
//	POST …/v1beta/models/{model}:countTokens
//	GET  …/v1beta/models[/{model}]
//
// A request's contents map to messages: a "user" turn's text parts to a
// user message (parts joined by "\n"), its functionResponse parts to tool
// messages; a "model" turn's text parts to the assistant's text (joined as
// the stream deltas they are), thought parts to its reasoning and
// functionCall parts to tool calls. Opaque thoughtSignatures are accepted
// on any part and kept only in the recorded request.

var (
	gmKnown = map[string]bool{"contents": true, "systemInstruction": true, "tools": true, "toolConfig": true, "generationConfig": true}
	// gmKnownNested: countTokens' generateContentRequest also names its model.
	gmKnownNested     = map[string]bool{"model": true, "contents": true, "systemInstruction": true, "tools": true, "toolConfig": true, "generationConfig": true}
	gmKnownGeneration = map[string]bool{"temperature": true, "topP": true, "topK": true, "maxOutputTokens": true, "stopSequences": true, "seed": true, "candidateCount": true}
)

// gmIgnoredKeys appends to *ignored prefix+key for each set key of obj
// that known does not hold, in sorted order.
func gmIgnoredKeys(obj json.RawMessage, prefix string, known map[string]bool, ignored *[]string) *apiError {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return badRequest(strings.TrimSuffix(prefix, "."), "%s: must be a JSON object: %v", strings.TrimSuffix(prefix, "."), err)
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if !known[k] && llmapi.IsSet(v) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		*ignored = append(*ignored, prefix+k)
	}
	return nil
}

// geminiRoute is the model and method of a …/models/{model}:{method} path.
func geminiRoute(path string) (model, method string) {
	i := strings.LastIndex(path, "/models/")
	if i < 0 {
		return "", ""
	}
	model, method, _ = strings.Cut(path[i+len("/models/"):], ":")
	if m, err := url.PathUnescape(model); err == nil {
		model = m
	}
	return model, method
}

// gmSchema turns a Schema in the Gemini API's OpenAPI subset (types in
// upper case: "OBJECT", "STRING", …) into JSON Schema (lower-case types),
// recursively through properties, items and anyOf.
func gmSchema(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			switch k {
			case "type":
				if s, ok := e.(string); ok {
					x[k] = strings.ToLower(s)
				}
			case "properties":
				if ps, ok := e.(map[string]any); ok {
					for pk, pv := range ps {
						ps[pk] = gmSchema(pv)
					}
				}
			case "items":
				x[k] = gmSchema(e)
			case "anyOf", "prefixItems":
				if as, ok := e.([]any); ok {
					for i := range as {
						as[i] = gmSchema(as[i])
					}
				}
			}
		}
	}
	return v
}

// gmPendingCall is a functionCall not yet answered.
type gmPendingCall struct {
	id, name string
	answered bool
}

// gmDecoder builds a conversation from contents.
type gmDecoder struct {
	conv    chat.Conversation
	ignored []string
	calls   []*gmPendingCall
	byID    map[string]*gmPendingCall
}

// decodeContents appends the messages of contents.
func (d *gmDecoder) decodeContents(contents []json.RawMessage) *apiError {
	for i, raw := range contents {
		param := "contents[" + strconv.Itoa(i) + "]"
		var ct llmapi.GeminiContent
		if string(raw) == "null" {
			return badRequest(param, "%s: must be a Content object, got null", param)
		}
		if e := decodeJSON(raw, &ct); e != nil {
			e.Param = param
			e.Message = param + ": " + e.Message
			return e
		}
		if len(ct.Parts) == 0 {
			return badRequest(param+".parts", "%s.parts: must not be empty", param)
		}
		switch ct.Role {
		case "", "user", "function":
			if e := d.userTurn(&ct, param); e != nil {
				return e
			}
		case "model":
			if e := d.modelTurn(&ct, param); e != nil {
				return e
			}
		default:
			return badRequest(param+".role", "%s.role: must be 'user' or 'model', got %q", param, ct.Role)
		}
	}
	return nil
}

// partKind checks that part has exactly one data field the gateway takes
// and returns it.
func (d *gmDecoder) partKind(p *llmapi.GeminiPart, pp string) (string, *apiError) {
	ks := p.DataKinds()
	switch {
	case len(ks) == 0:
		return "", badRequest(pp, "%s: part has no data: set one of text, functionCall, functionResponse", pp)
	case len(ks) > 1:
		return "", badRequest(pp, "%s: part sets more than one data field (%s); set exactly one", pp, strings.Join(ks, ", "))
	}
	switch ks[0] {
	case "text", "functionCall", "functionResponse":
	default:
		return "", unsupported(pp+"."+ks[0], "%s.%s: part type %s is not supported (text, functionCall and functionResponse only)", pp, ks[0], ks[0])
	}
	ignoreSet(&d.ignored, pp+".videoMetadata", p.VideoMetadata)
	ignoreSet(&d.ignored, pp+".partMetadata", p.PartMetadata)
	ignoreSet(&d.ignored, pp+".mediaResolution", p.MediaRes)
	return ks[0], nil
}

func (d *gmDecoder) userTurn(ct *llmapi.GeminiContent, param string) *apiError {
	var text []string
	flush := func() {
		if len(text) > 0 {
			d.conv.Messages = append(d.conv.Messages, chat.Message{Role: chat.RoleUser, Content: strings.Join(text, "\n")})
			text = text[:0]
		}
	}
	for j := range ct.Parts {
		p := &ct.Parts[j]
		pp := param + ".parts[" + strconv.Itoa(j) + "]"
		kind, e := d.partKind(p, pp)
		if e != nil {
			return e
		}
		switch kind {
		case "text":
			if p.Thought {
				return badRequest(pp+".thought", "%s.thought: thought parts belong to 'model' turns", pp)
			}
			text = append(text, *p.Text)
		case "functionResponse":
			flush()
			fr := p.FunctionResponse
			fp := pp + ".functionResponse"
			if fr.Name == "" {
				return badRequest(fp+".name", "%s.name: required", fp)
			}
			if llmapi.IsSet(fr.Parts) && string(fr.Parts) != "[]" {
				return unsupported(fp+".parts", "%s.parts: multimodal function responses are not supported", fp)
			}
			ignoreSet(&d.ignored, fp+".willContinue", fr.WillContinue)
			ignoreSet(&d.ignored, fp+".scheduling", fr.Scheduling)
			var pc *gmPendingCall
			if fr.ID != "" {
				pc = d.byID[fr.ID]
				if pc == nil {
					return badRequest(fp+".id", "%s.id: no earlier functionCall has id %q", fp, fr.ID)
				}
				if pc.name != fr.Name {
					return badRequest(fp+".name", "%s.name: %q does not match the name %q of functionCall %q", fp, fr.Name, pc.name, fr.ID)
				}
			} else {
				for _, c := range d.calls {
					if !c.answered && c.name == fr.Name {
						pc = c
						break
					}
				}
				if pc == nil {
					return badRequest(fp+".name", "%s.name: no earlier unanswered functionCall named %q", fp, fr.Name)
				}
			}
			pc.answered = true
			if !llmapi.IsSet(fr.Response) {
				return badRequest(fp+".response", "%s.response: required (a JSON object)", fp)
			}
			if fr.Response[0] != '{' {
				return badRequest(fp+".response", "%s.response: must be a JSON object", fp)
			}
			d.conv.Messages = append(d.conv.Messages, chat.Message{Role: chat.RoleTool, Content: llmapi.GeminiFunctionResult(fr.Response), ToolCallID: pc.id, Name: fr.Name})
		case "functionCall":
			return badRequest(pp+".functionCall", "%s.functionCall: function calls belong to 'model' turns", pp)
		}
	}
	flush()
	return nil
}

func (d *gmDecoder) modelTurn(ct *llmapi.GeminiContent, param string) *apiError {
	msg := chat.Message{Role: chat.RoleAssistant}
	var text strings.Builder
	for j := range ct.Parts {
		p := &ct.Parts[j]
		pp := param + ".parts[" + strconv.Itoa(j) + "]"
		kind, e := d.partKind(p, pp)
		if e != nil {
			return e
		}
		switch kind {
		case "text":
			if p.Thought {
				msg.Reasoning += *p.Text
			} else {
				text.WriteString(*p.Text)
			}
		case "functionCall":
			fc := p.FunctionCall
			fp := pp + ".functionCall"
			if fc.Name == "" {
				return badRequest(fp+".name", "%s.name: required", fp)
			}
			if llmapi.IsSet(fc.Args) && fc.Args[0] != '{' {
				return badRequest(fp+".args", "%s.args: must be a JSON object", fp)
			}
			id := fc.ID
			if id == "" {
				// A call without id (the Gemini API does not require
				// one) gets one from its place in the contents, the
				// same in every later request holding it.
				id = "gemini_" + strings.NewReplacer("[", "", "]", "", ".parts", "_").Replace(pp)
			} else if d.byID[id] != nil {
				return badRequest(fp+".id", "%s.id: %q is the id of an earlier functionCall", fp, id)
			}
			pc := &gmPendingCall{id: id, name: fc.Name}
			if d.byID == nil {
				d.byID = map[string]*gmPendingCall{}
			}
			d.byID[id] = pc
			d.calls = append(d.calls, pc)
			msg.ToolCalls = append(msg.ToolCalls, chat.ToolCall{ID: id, Name: fc.Name, Arguments: llmapi.CompactJSON(fc.Args)})
		case "functionResponse":
			return badRequest(pp+".functionResponse", "%s.functionResponse: function responses belong to 'user' turns", pp)
		}
	}
	msg.Content = text.String()
	d.conv.Messages = append(d.conv.Messages, msg)
	return nil
}

// systemInstruction appends the system message of raw (a Content).
func (d *gmDecoder) systemInstruction(raw json.RawMessage) *apiError {
	const param = "systemInstruction"
	if !llmapi.IsSet(raw) {
		return nil
	}
	var ct llmapi.GeminiContent
	if err := json.Unmarshal(raw, &ct); err != nil {
		return badRequest(param, "%s: must be a Content object with text parts: %v", param, err)
	}
	var text []string
	for j := range ct.Parts {
		p := &ct.Parts[j]
		pp := param + ".parts[" + strconv.Itoa(j) + "]"
		kind, e := d.partKind(p, pp)
		if e != nil {
			return e
		}
		if kind != "text" {
			return badRequest(pp, "%s: systemInstruction takes text parts only, got %s", pp, kind)
		}
		text = append(text, *p.Text)
	}
	d.conv.Messages = append(d.conv.Messages, chat.Message{Role: chat.RoleSystem, Content: strings.Join(text, "\n")})
	return nil
}

// tools appends the function declarations of tools.
func (d *gmDecoder) tools(tools []json.RawMessage) *apiError {
	for i, raw := range tools {
		tp := "tools[" + strconv.Itoa(i) + "]"
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil || m == nil {
			return badRequest(tp, "%s: must be a Tool object", tp)
		}
		for k, v := range m {
			if k != "functionDeclarations" && llmapi.IsSet(v) {
				return unsupported(tp+"."+k, "%s.%s: tool %s is not supported (functionDeclarations only)", tp, k, k)
			}
		}
		var fds []llmapi.GeminiFunctionDeclaration
		if err := json.Unmarshal(m["functionDeclarations"], &fds); err != nil && llmapi.IsSet(m["functionDeclarations"]) {
			return badRequest(tp+".functionDeclarations", "%s.functionDeclarations: must be a list of FunctionDeclaration: %v", tp, err)
		}
		for j, fd := range fds {
			fp := tp + ".functionDeclarations[" + strconv.Itoa(j) + "]"
			if fd.Name == "" {
				return badRequest(fp+".name", "%s.name: required", fp)
			}
			ignoreSet(&d.ignored, fp+".response", fd.Response)
			ignoreSet(&d.ignored, fp+".responseJsonSchema", fd.ResponseJSONSchema)
			ignoreSet(&d.ignored, fp+".behavior", fd.Behavior)
			params := fd.ParametersJSONSchema
			switch {
			case llmapi.IsSet(fd.Parameters) && llmapi.IsSet(fd.ParametersJSONSchema):
				return badRequest(fp+".parameters", "%s: set parameters or parametersJsonSchema, not both", fp)
			case llmapi.IsSet(fd.Parameters):
				var v any
				if err := json.Unmarshal(fd.Parameters, &v); err != nil {
					return badRequest(fp+".parameters", "%s.parameters: %v", fp, err)
				}
				if _, ok := v.(map[string]any); !ok {
					return badRequest(fp+".parameters", "%s.parameters: must be a Schema object", fp)
				}
				params = mustJSON(gmSchema(v))
			case llmapi.IsSet(params):
				if params[0] != '{' {
					return badRequest(fp+".parametersJsonSchema", "%s.parametersJsonSchema: must be a JSON Schema object", fp)
				}
			default:
				params = nil
			}
			d.conv.Tools = append(d.conv.Tools, chat.Tool{Name: fd.Name, Description: fd.Description, Parameters: params})
		}
	}
	return nil
}

func decodeGemini(p *Proxy, c *call) *apiError {
	body := c.body
	known := gmKnown
	if c.countOnly {
		var cr llmapi.GeminiCountRequest
		if e := decodeJSON(body, &cr); e != nil {
			return e
		}
		if llmapi.IsSet(cr.GenerateContentRequest) {
			if cr.Contents != nil {
				return badRequest("contents", "set contents or generateContentRequest, not both")
			}
			body = cr.GenerateContentRequest
			known = gmKnownNested
		}
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return badRequest("", "request body must be a JSON object (GenerateContentRequest)")
	}
	var req llmapi.GeminiRequest
	if e := decodeJSON(body, &req); e != nil {
		return e
	}
	var d gmDecoder
	if e := gmIgnoredKeys(body, "", known, &d.ignored); e != nil {
		return e
	}
	if e := d.systemInstruction(req.SystemInstruction); e != nil {
		return e
	}
	if len(req.Contents) == 0 {
		return badRequest("contents", "contents: must not be empty")
	}
	if e := d.decodeContents(req.Contents); e != nil {
		return e
	}
	if e := d.tools(req.Tools); e != nil {
		return e
	}
	if tc := req.ToolConfig; tc != nil {
		ignoreSet(&d.ignored, "toolConfig.retrievalConfig", tc.RetrievalConfig)
		if fc := tc.FunctionCallingConfig; fc != nil {
			switch fc.Mode {
			case "", "AUTO", "MODE_UNSPECIFIED":
			case "NONE":
				d.conv.Tools = nil
			case "ANY", "VALIDATED":
				// The template cannot force a call: the model decides.
				d.ignored = append(d.ignored, "toolConfig.functionCallingConfig.mode ("+fc.Mode+")")
			default:
				return badRequest("toolConfig.functionCallingConfig.mode", "toolConfig.functionCallingConfig.mode: %q is not one of AUTO, ANY, NONE, VALIDATED", fc.Mode)
			}
			if len(fc.AllowedFunctionNames) > 0 {
				d.ignored = append(d.ignored, "toolConfig.functionCallingConfig.allowedFunctionNames")
			}
		}
	}
	if e := checkConversation(&d.conv, "contents"); e != nil {
		return e
	}
	if last := d.conv.Messages[len(d.conv.Messages)-1]; last.Role == chat.RoleAssistant && !c.countOnly {
		return unsupported("contents["+strconv.Itoa(len(req.Contents)-1)+"]", "a final 'model' turn (prefill) is not supported: end with a 'user' turn")
	}
	var s engine.Sampling
	var stop []string
	temperatureSet := false
	if llmapi.IsSet(req.GenerationConfig) {
		var gc llmapi.GeminiGenerationConfig
		if e := decodeJSON(req.GenerationConfig, &gc); e != nil {
			e.Param = "generationConfig." + e.Param
			return e
		}
		if e := gmIgnoredKeys(req.GenerationConfig, "generationConfig.", gmKnownGeneration, &d.ignored); e != nil {
			return e
		}
		if gc.CandidateCount != nil && *gc.CandidateCount != 1 {
			return unsupported("generationConfig.candidateCount", "generationConfig.candidateCount: only 1 is supported, got %d", *gc.CandidateCount)
		}
		if gc.Temperature != nil {
			s.Temperature, temperatureSet = *gc.Temperature, true
		}
		if gc.TopP != nil {
			s.TopP = *gc.TopP
		}
		if gc.TopK != nil {
			if *gc.TopK < 0 || *gc.TopK > 1<<30 || *gc.TopK != float64(int(*gc.TopK)) {
				return badRequest("generationConfig.topK", "generationConfig.topK: must be a non-negative integer, got %v", *gc.TopK)
			}
			s.TopK = int(*gc.TopK)
		}
		if gc.MaxOutputTokens != nil {
			s.MaxTokens = *gc.MaxOutputTokens
		}
		if gc.Seed != nil {
			s.Seed = uint64(*gc.Seed)
		}
		stop = gc.StopSequences
	}
	model := c.pathModel
	if e := p.applyOverrides(c, &model, &s, temperatureSet); e != nil {
		return e
	}
	c.ignored = d.ignored
	c.chat = &ChatRequest{Model: model, Conv: d.conv, Sampling: s, Stop: stop, ToolIDPrefix: "call_"}
	return nil
}

// gmFinishReason is the candidate's finishReason: the Gemini API answers
// STOP for a turn that ends in function calls too.
func gmFinishReason(r *Result) string {
	if r.FinishReason == engine.FinishLength {
		return "MAX_TOKENS"
	}
	return "STOP"
}

// gmParts are the reply's parts: a thought part, the text (also when
// empty and nothing else was said), then the function calls.
func gmParts(r *Result) []llmapi.GeminiOutPart {
	var out []llmapi.GeminiOutPart
	if r.Message.Reasoning != "" {
		th := r.Message.Reasoning
		out = append(out, llmapi.GeminiOutPart{Text: &th, Thought: true})
	}
	if r.Message.Content != "" || len(r.Message.ToolCalls) == 0 {
		t := r.Message.Content
		out = append(out, llmapi.GeminiOutPart{Text: &t})
	}
	for _, tc := range r.Message.ToolCalls {
		out = append(out, llmapi.GeminiOutPart{FunctionCall: &llmapi.GeminiFunctionCall{ID: tc.ID, Name: tc.Name, Args: jsonObject(tc.Arguments)}})
	}
	return out
}

func gmChunk(c *call, parts []llmapi.GeminiOutPart, last bool) *llmapi.GeminiResponse {
	r := c.res
	resp := &llmapi.GeminiResponse{Candidates: make([]llmapi.GeminiCandidate, 1), ModelVersion: r.Model, ResponseID: c.id}
	cand := &resp.Candidates[0]
	cand.Content.Role = "model"
	cand.Content.Parts = parts
	if last {
		cand.FinishReason = gmFinishReason(r)
		resp.UsageMetadata = &llmapi.GeminiUsage{PromptTokenCount: r.PromptTokens, CandidatesTokenCount: r.CompletionTokens, TotalTokenCount: r.PromptTokens + r.CompletionTokens}
	}
	return resp
}

func encodeGemini(p *Proxy, c *call) ([]byte, error) {
	return json.Marshal(gmChunk(c, gmParts(c.res), true))
}

// gmChunks are the stream's responses: one per part, the last with the
// finishReason and usage.
func gmChunks(c *call) [][]byte {
	parts := gmParts(c.res)
	out := make([][]byte, len(parts))
	for i := range parts {
		out[i] = mustJSON(gmChunk(c, parts[i:i+1], i == len(parts)-1))
	}
	return out
}

// streamGemini is streamGenerateContent?alt=sse: one data event per chunk.
func streamGemini(p *Proxy, c *call, buf []byte) []byte {
	for _, ch := range gmChunks(c) {
		buf = appendSSEData(buf, ch)
	}
	return buf
}

// arrayGemini is streamGenerateContent without alt=sse: the chunks as one
// JSON array.
func arrayGemini(p *Proxy, c *call, buf []byte) []byte {
	buf = append(buf, '[')
	for i, ch := range gmChunks(c) {
		if i > 0 {
			buf = append(buf, ",\r\n"...)
		}
		buf = append(buf, ch...)
	}
	return append(buf, ']')
}

// prepareGemini reads the model and method from the request's path and
// the stream form from its alt parameter.
func prepareGemini(c *call, r *http.Request) *apiError {
	model, method := geminiRoute(r.URL.Path)
	c.pathModel = model
	switch method {
	case "generateContent":
	case "streamGenerateContent":
		switch alt := r.URL.Query().Get("alt"); alt {
		case "sse":
			c.stream = true
		case "", "json":
			c.arrayStream = true
		default:
			return badRequest("alt", "alt: %q is not supported (sse or json)", alt)
		}
	}
	return nil
}

// geminiKey returns the Gemini API's key of r: the x-goog-api-key header
// or the key query parameter.
func geminiKey(r *http.Request) string {
	if k := strings.TrimSpace(r.Header.Get("X-Goog-Api-Key")); k != "" {
		return k
	}
	return r.URL.Query().Get("key")
}

// requestKey is the scoped key r carries: Authorization: Bearer, x-api-key,
// x-goog-api-key or ?key=; keys given more than one way must agree.
func requestKey(r *http.Request) (string, error) {
	key, err := api.RequestKey(r)
	if err != nil {
		return "", err
	}
	g := strings.TrimSpace(r.Header.Get("X-Goog-Api-Key"))
	q := r.URL.Query().Get("key")
	for _, k := range [...]string{g, q} {
		switch {
		case k == "":
		case key == "":
			key = k
		case k != key:
			return "", api.ErrConflictingKeys
		}
	}
	return key, nil
}

// serveGeminiModels answers GET v1beta/models (the list) and
// v1beta/models/{model} (one Model).
func (p *Proxy) serveGeminiModels(w http.ResponseWriter, r *http.Request, t Target, model string) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeError(w, styleGoogle, &apiError{Status: http.StatusMethodNotAllowed, Message: "use GET"})
		return
	}
	mode, aerr := p.authorize(r.Context(), r, t, false)
	if aerr != nil {
		writeError(w, styleGoogle, aerr)
		return
	}
	name := p.overrides(mode).Model
	if name == "" {
		name = p.backend.ModelName()
	}
	if model != "" {
		// Every model name is served (by the backend's model, or the
		// mode's override): a harness may ask about the one it names.
		name = model
	}
	var b []byte
	if model == "" {
		b = append(b, `{"models":[`...)
	}
	b = append(b, `{"name":`...)
	b = fastjson.AppendString(b, "models/"+name)
	b = append(b, `,"baseModelId":`...)
	b = fastjson.AppendString(b, name)
	b = append(b, `,"version":"agl","displayName":`...)
	b = fastjson.AppendString(b, name)
	b = append(b, `,"description":"served by agl","supportedGenerationMethods":["generateContent","streamGenerateContent","countTokens"]}`...)
	if model == "" {
		b = append(b, "]}"...)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}
