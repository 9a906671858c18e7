// Package llmapi is the one home of the LLM API formats the gateway
// serves: the wire types of the five shapes (OpenAI Chat Completions and
// Completions, OpenAI Responses, Anthropic Messages, the Gemini API), the
// reflection-free codec of the hottest one (Chat Completions), and
// ParseCall, which reads a recorded call of any shape as messages, tool
// calls and tool results, declared tools and the model's reply in one
// common shape. The proxy decodes requests and encodes answers with these
// types (and validates them itself); the dashboard and samples read the
// calls the proxy recorded with ParseCall, so no one parses a shape
// again.
package llmapi
