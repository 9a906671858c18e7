package chat

// PythonJSON re-serializes JSON text as Python's json.dumps(v,
// ensure_ascii=False) writes it (see pyJSON): what Agent Lightning's
// controller puts in an env_map variable.
func PythonJSON(raw []byte) (string, error) { return pyJSON(raw) }
