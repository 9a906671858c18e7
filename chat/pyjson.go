package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// pyJSON re-serializes JSON text the way Python's json.dumps (and the
// Jinja "tojson" filter of Hugging Face chat templates) writes it: ", " and
// ": " separators, keys in their original order, non-ASCII characters
// unescaped. Numbers are kept as written.
func pyJSON(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var sb strings.Builder
	if err := pyValue(dec, &sb); err != nil {
		return "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", fmt.Errorf("trailing data after JSON value")
	}
	return sb.String(), nil
}

func pyValue(dec *json.Decoder, sb *strings.Builder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			sb.WriteByte('{')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					sb.WriteString(", ")
				}
				k, err := dec.Token()
				if err != nil {
					return err
				}
				pyString(sb, k.(string))
				sb.WriteString(": ")
				if err := pyValue(dec, sb); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return err
			}
			sb.WriteByte('}')
		case '[':
			sb.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					sb.WriteString(", ")
				}
				if err := pyValue(dec, sb); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return err
			}
			sb.WriteByte(']')
		default:
			return fmt.Errorf("unexpected %v", v)
		}
	case string:
		pyString(sb, v)
	case json.Number:
		sb.WriteString(v.String())
	case bool:
		if v {
			sb.WriteString("true")
		} else {
			sb.WriteString("false")
		}
	case nil:
		sb.WriteString("null")
	}
	return nil
}

// pyString writes s as a JSON string the way json.dumps(ensure_ascii=False)
// does.
func pyString(sb *strings.Builder, s string) {
	sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(sb, `\u%04x`, r)
			} else {
				sb.WriteRune(r)
			}
		}
	}
	sb.WriteByte('"')
}

// keyValue is one member of a JSON object, in document order.
type keyValue struct {
	Key   string
	Value json.RawMessage
}

// objectMembers returns the members of a JSON object in document order.
func objectMembers(raw []byte) ([]keyValue, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("not a JSON object")
	}
	var out []keyValue
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, keyValue{Key: k.(string), Value: v})
	}
	return out, nil
}

// validName reports whether a tool name can be written between quotes
// without escaping (the Qwen template inserts it verbatim).
func validName(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r == '"' || r == '\\' || r < 0x20 {
			return false
		}
	}
	return true
}
