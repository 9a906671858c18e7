package llmapi

import (
	"encoding/json"
)

// The Gemini API (generateContent, streamGenerateContent, countTokens):
// requests, contents and parts as the gateway reads them; answers as it
// writes them.

// GeminiFunctionCall is a functionCall part's call.
type GeminiFunctionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

// GeminiFunctionResponse is a functionResponse part's result.
type GeminiFunctionResponse struct {
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Response     json.RawMessage `json:"response"`
	Parts        json.RawMessage `json:"parts"`
	WillContinue json.RawMessage `json:"willContinue"`
	Scheduling   json.RawMessage `json:"scheduling"`
}

// GeminiPart is a part of a request's Content.
type GeminiPart struct {
	Text             *string                 `json:"text"`
	Thought          bool                    `json:"thought"`
	ThoughtSignature json.RawMessage         `json:"thoughtSignature"`
	FunctionCall     *GeminiFunctionCall     `json:"functionCall"`
	FunctionResponse *GeminiFunctionResponse `json:"functionResponse"`
	// Data the model cannot take: refused by name.
	InlineData          json.RawMessage `json:"inlineData"`
	FileData            json.RawMessage `json:"fileData"`
	ExecutableCode      json.RawMessage `json:"executableCode"`
	CodeExecutionResult json.RawMessage `json:"codeExecutionResult"`
	// Metadata, listed as ignored.
	VideoMetadata json.RawMessage `json:"videoMetadata"`
	PartMetadata  json.RawMessage `json:"partMetadata"`
	MediaRes      json.RawMessage `json:"mediaResolution"`
}

// GeminiContent is a Content: a role ("user", "model") and its parts.
type GeminiContent struct {
	Role  string       `json:"role"`
	Parts []GeminiPart `json:"parts"`
}

// GeminiFunctionDeclaration is a function a request's tools declare.
type GeminiFunctionDeclaration struct {
	Name                 string          `json:"name"`
	Description          string          `json:"description"`
	Parameters           json.RawMessage `json:"parameters"`
	ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema"`
	Response             json.RawMessage `json:"response"`
	ResponseJSONSchema   json.RawMessage `json:"responseJsonSchema"`
	Behavior             json.RawMessage `json:"behavior"`
}

// GeminiRequest holds the GenerateContentRequest fields the gateway reads;
// the proxy lists every other top-level or generationConfig field that is
// set in the event's ignored field.
type GeminiRequest struct {
	Contents          []json.RawMessage `json:"contents"`
	SystemInstruction json.RawMessage   `json:"systemInstruction"`
	Tools             []json.RawMessage `json:"tools"`
	ToolConfig        *struct {
		FunctionCallingConfig *struct {
			Mode                 string   `json:"mode"`
			AllowedFunctionNames []string `json:"allowedFunctionNames"`
		} `json:"functionCallingConfig"`
		RetrievalConfig json.RawMessage `json:"retrievalConfig"`
	} `json:"toolConfig"`
	GenerationConfig json.RawMessage `json:"generationConfig"`
}

// GeminiGenerationConfig holds the generationConfig fields the gateway honours.
type GeminiGenerationConfig struct {
	Temperature     *float32 `json:"temperature"`
	TopP            *float32 `json:"topP"`
	TopK            *float64 `json:"topK"`
	MaxOutputTokens *int     `json:"maxOutputTokens"`
	StopSequences   []string `json:"stopSequences"`
	Seed            *int64   `json:"seed"`
	CandidateCount  *int     `json:"candidateCount"`
}

// dataKinds names the data fields set in a part.
func (p *GeminiPart) DataKinds() []string {
	var ks []string
	if p.Text != nil {
		ks = append(ks, "text")
	}
	if p.FunctionCall != nil {
		ks = append(ks, "functionCall")
	}
	if p.FunctionResponse != nil {
		ks = append(ks, "functionResponse")
	}
	for _, d := range [...]struct {
		name string
		raw  json.RawMessage
	}{{"inlineData", p.InlineData}, {"fileData", p.FileData}, {"executableCode", p.ExecutableCode}, {"codeExecutionResult", p.CodeExecutionResult}} {
		if IsSet(d.raw) {
			ks = append(ks, d.name)
		}
	}
	return ks
}

// GeminiCountRequest is countTokens' body: contents, or a whole
// generateContentRequest.
type GeminiCountRequest struct {
	Contents               []json.RawMessage `json:"contents"`
	GenerateContentRequest json.RawMessage   `json:"generateContentRequest"`
}

// GeminiOutPart is a part of an answer's candidate.
type GeminiOutPart struct {
	Text         *string             `json:"text,omitempty"`
	Thought      bool                `json:"thought,omitempty"`
	FunctionCall *GeminiFunctionCall `json:"functionCall,omitempty"`
}

// GeminiUsage is the usageMetadata of an answer.
type GeminiUsage struct {
	PromptTokenCount     int `json:"promptTokenCount"`
	CandidatesTokenCount int `json:"candidatesTokenCount"`
	TotalTokenCount      int `json:"totalTokenCount"`
}

// GeminiCandidate is a candidate of an answer.
type GeminiCandidate struct {
	Content struct {
		Role  string          `json:"role"`
		Parts []GeminiOutPart `json:"parts"`
	} `json:"content"`
	FinishReason string `json:"finishReason,omitempty"`
	Index        int    `json:"index"`
}

// GeminiResponse is a GenerateContentResponse (an answer or a stream
// chunk).
type GeminiResponse struct {
	Candidates    []GeminiCandidate `json:"candidates"`
	UsageMetadata *GeminiUsage      `json:"usageMetadata,omitempty"`
	ModelVersion  string            `json:"modelVersion"`
	ResponseID    string            `json:"responseId"`
}

// GeminiFunctionResult is the text of a functionResponse's response the
// model sees: the string of {"output": "…"} (Gemini CLI's tool results),
// else the object as compact JSON.
func GeminiFunctionResult(raw json.RawMessage) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil && len(m) == 1 {
		if out, ok := m["output"]; ok && len(out) > 0 && out[0] == '"' {
			var s string
			if json.Unmarshal(out, &s) == nil {
				return s
			}
		}
	}
	return CompactJSON(raw)
}
