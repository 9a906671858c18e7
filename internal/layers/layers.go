// Package layers states the layering of agl's packages, lowest first, and
// its test checks it: a package imports only packages of lower layers
// and the packages it is nested under (store/postgres/pgtest imports
// store/postgres, trainer/embedded imports trainer). Packages of one
// layer are peers and do not import each other. Tests may import what
// they need.
package layers

// Layers lists the module's packages (paths relative to the module
// root; "examples/" and "tests/" stand for every package under them) by
// layer, lowest first.
func Layers() [][]string {
	return [][]string{
		// Leaves: no package of agl.
		{"engine", "tokenizer", "config", "model/safetensors", "internal/fastjson", "internal/pidfd", "internal/seed", "internal/doccheck", "internal/layers"},
		// What generates and renders tokens; the OS sandbox.
		{"chat", "model", "sandbox"},
		// The store: its types, event types and reward rule, the codec.
		{"store"},
		// Store backends.
		{"store/sqlite", "store/postgres", "store/postgres/pgtest"},
		// The wire types of the API and its client; the upstream engine.
		{"api", "engine/upstream"},
		// The LLM API formats: the wire types of the five shapes and the
		// conversation normalised from them.
		{"llmapi"},
		// Samples from events; shared test kits.
		{"samples", "store/storetest", "internal/testutil"},
		// The parts of the system.
		{"proxy", "gateway", "otlp", "metrics", "dashboard", "controller", "trainer"},
		// Parts built on a part (Agent Lightning's API on the proxy; the
		// policies the trainer drives; the controller on Kubernetes).
		{"gateway/al", "controller/kubernetes", "trainer/embedded", "trainer/tinker"},
		// A loopback stand-in of a service, built on its client.
		{"trainer/tinker/tinkertest"},
		// The assembly of one config.
		{"app"},
		// Commands, examples and end-to-end tests.
		{"cmd/agl", "examples/", "tests/", "trainer/tinker/tinkertest/cmd/tinkerserve"},
	}
}
