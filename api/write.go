package api

import (
	"encoding/json"
	"net/http"
)

// WriteJSON writes v as the JSON body of a response with the given status
// (HTML characters unescaped), as every /api and dashboard route answers.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
