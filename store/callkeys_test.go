package store_test

import (
	"encoding/json"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// TestCodecFindsModelCallKeys: the codec finds the values it stores apart
// (prompt and response ids, request) and the agent under the keys
// api.ModelCall, the one definition of the model_request record, gives
// them, as encoding/json writes it.
func TestCodecFindsModelCallKeys(t *testing.T) {
	b, err := json.Marshal(api.ModelCall{CallID: "c", Agent: "writer", PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3},
		Request: json.RawMessage(`{"messages":[]}`)})
	if err != nil {
		t.Fatal(err)
	}
	holes, agent, ok := store.TopFields(b)
	if !ok || holes != 3 || agent != "writer" {
		t.Errorf("in %s the codec found %d of prompt_ids, response_ids and request, agent %q (ok %v)", b, holes, agent, ok)
	}
}
