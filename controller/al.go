package controller

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/store"
)

// Agent Lightning rollouts (created through the gateway's AL API, which
// keeps AL's config in the rollout's metadata, api.ALSpec) run on this
// controller like any other, with AL's agent environment added:
//
//	AGL_OPENAI_BASE_URL = GW{ALPrefix}/proxy/rollout/{rollout}/attempt/0/mode/{train|val}/openai/v1
//	AGL_EVENT_URL       = GW{ALPrefix}/api/rollouts/{rollout}/attempt/0/events
//	AGL_KEY             = the attempt's scoped key (never the admin key)
//	config.local.env_map  NAME → the rollout input at that path, as AL's
//	                      local controller resolves it
//
// and, when config.local.agent_class is set, the harness is AL's local
// worker instead of the configured command: python3 -c WORKER CLASS, which
// imports the class, instantiates it and calls run() (awaiting a coroutine),
// exiting 0 on success, 1 with the traceback on an exception. WORKER is
// AL's own (agentlightning.controller.local_reconciler) when that package
// is importable, else the same steps written out.

// DefaultALPrefix is where the gateway serves AL's API.
const DefaultALPrefix = "/al"

// alWorker is the python3 -c program of AL's local controller.
const alWorker = `import sys
try:
    from agentlightning.controller.local_reconciler import _run_local_reconciler_worker
except ImportError:
    def _run_local_reconciler_worker(agent_class_path):
        import asyncio, importlib, inspect, traceback
        try:
            if ":" in agent_class_path:
                module_name, class_name = agent_class_path.split(":", 1)
            else:
                module_name, class_name = agent_class_path.rsplit(".", 1)
            loaded = getattr(importlib.import_module(module_name), class_name)
            if not isinstance(loaded, type):
                raise TypeError(f"{agent_class_path} is not a class")
            result = loaded().run()
            if inspect.isawaitable(result):
                asyncio.run(result)
            return 0
        except Exception:
            traceback.print_exc()
            return 1
sys.exit(_run_local_reconciler_worker(sys.argv[1]))
`

// alHarness returns the environment and command of an attempt: for an AL
// rollout, env plus AL's variables and, with config.local.agent_class, AL's
// worker; otherwise env and the configured command. An env_map path the
// input does not have is an error, as in AL.
func (c *runner) alHarness(claim store.Claim, env []string) ([]string, []string, error) {
	spec, ok := api.ALSpec(claim.Rollout.Metadata)
	if !ok {
		return env, c.cfg.Command, nil
	}
	env = append(env, c.alVars(c.cfg.GatewayURL, claim)...)
	cmd := c.cfg.Command
	if spec.Local != nil {
		vars, err := alEnvMap(claim.Rollout.Task, spec.Local.EnvMap)
		if err != nil {
			return nil, nil, err
		}
		env = append(env, vars...)
		if spec.Local.AgentClass != nil && *spec.Local.AgentClass != "" {
			cmd = []string{c.cfg.Python, "-c", alWorker, *spec.Local.AgentClass}
		}
	}
	return env, cmd, nil
}

// alVars returns AL's variables of an AL rollout's agent — AGL_KEY (the
// attempt's scoped key), AGL_OPENAI_BASE_URL and AGL_EVENT_URL under
// gatewayURL (the gateway as the agent reaches it) and the AL prefix — and
// nil for other rollouts.
func (c *runner) alVars(gatewayURL string, claim store.Claim) []string {
	if _, ok := api.ALSpec(claim.Rollout.Metadata); !ok {
		return nil
	}
	mode := "train"
	if claim.Rollout.Mode == store.ModeVal {
		mode = "val"
	}
	base := strings.TrimRight(gatewayURL, "/") + c.cfg.ALPrefix
	rid := url.PathEscape(claim.Rollout.ID)
	return []string{
		"AGL_KEY=" + claim.Key,
		"AGL_OPENAI_BASE_URL=" + base + "/proxy/rollout/" + rid + "/attempt/0/mode/" + mode + "/openai/v1",
		"AGL_EVENT_URL=" + base + "/api/rollouts/" + rid + "/attempt/0/events",
	}
}

// alEnvMap is AL's _build_env_from_map: NAME=value for each entry, a
// string value as is, anything else as Python's json.dumps writes it.
func alEnvMap(input json.RawMessage, envMap map[string]string) ([]string, error) {
	names := make([]string, 0, len(envMap))
	for name := range envMap {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []string
	for _, name := range names {
		path := envMap[name]
		if strings.ContainsRune(name, '=') || name == "" {
			return nil, fmt.Errorf("local.env_map: %q is not an environment variable name", name)
		}
		raw, literal, err := alResolve(input, path)
		if err != nil {
			return nil, err
		}
		if literal {
			out = append(out, name+"="+path)
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			out = append(out, name+"="+s)
			continue
		}
		v, err := chat.PythonJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("local.env_map.%s value is not JSON serializable: %w", name, err)
		}
		out = append(out, name+"="+v)
	}
	return out, nil
}

// alResolve is AL's _resolve_input_path: "input" is the input, "input.a.0"
// walks objects by key and arrays by index, anything else is a literal.
func alResolve(input json.RawMessage, path string) (json.RawMessage, bool, error) {
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	if path == "input" {
		return input, false, nil
	}
	rest, ok := strings.CutPrefix(path, "input.")
	if !ok {
		return nil, true, nil
	}
	v := input
	for _, part := range strings.Split(rest, ".") {
		var obj map[string]json.RawMessage
		if json.Unmarshal(v, &obj) == nil && obj != nil {
			if next, ok := obj[part]; ok {
				v = next
				continue
			}
		}
		var arr []json.RawMessage
		if json.Unmarshal(v, &arr) == nil && arr != nil {
			if i, err := strconv.Atoi(part); err == nil && isDigits(part) && i < len(arr) {
				v = arr[i]
				continue
			}
		}
		return nil, false, fmt.Errorf("local.env_map path not found: %s", path)
	}
	return v, false, nil
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}
