package llmapi

import (
	"encoding/json"
)

// The Gemini API (generateContent, streamGenerateContent, countTokens):
// requests, contents and parts as the gateway reads them; answers as it
// writes them.

type GeminiFunctionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

type GeminiFunctionResponse struct {
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Response     json.RawMessage `json:"response"`
	Parts        json.RawMessage `json:"parts"`
	WillContinue json.RawMessage `json:"willContinue"`
	Scheduling   json.RawMessage `json:"scheduling"`
}

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

type GeminiContent struct {
	Role  string       `json:"role"`
	Parts []GeminiPart `json:"parts"`
}

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
// every other top-level or generationConfig field that is set is listed
// in the event's ignored field (gmKnown, gmKnownGeneration).
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

type GeminiOutPart struct {
	Text         *string             `json:"text,omitempty"`
	Thought      bool                `json:"thought,omitempty"`
	FunctionCall *GeminiFunctionCall `json:"functionCall,omitempty"`
}

type GeminiUsage struct {
	PromptTokenCount     int `json:"promptTokenCount"`
	CandidatesTokenCount int `json:"candidatesTokenCount"`
	TotalTokenCount      int `json:"totalTokenCount"`
}

type GeminiCandidate struct {
	Content struct {
		Role  string          `json:"role"`
		Parts []GeminiOutPart `json:"parts"`
	} `json:"content"`
	FinishReason string `json:"finishReason,omitempty"`
	Index        int    `json:"index"`
}

type GeminiResponse struct {
	Candidates    []GeminiCandidate `json:"candidates"`
	UsageMetadata *GeminiUsage      `json:"usageMetadata,omitempty"`
	ModelVersion  string            `json:"modelVersion"`
	ResponseID    string            `json:"responseId"`
}

// GeminiFunctionResult is the text of a functionResponse's response the model
// sees: the string of {"output": "…"} (Gemini CLI's tool results), else
// the object as compact JSON.
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
