package tokenizer

import "path/filepath"

// FileName is the name of the tokenizer file in a model directory.
const FileName = "tokenizer.json"

// LoadDir loads dir/tokenizer.json (see [LoadFile]).
func LoadDir(dir string) (Tokenizer, error) {
	return LoadFile(filepath.Join(dir, FileName))
}
