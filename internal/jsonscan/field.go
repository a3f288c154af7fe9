package jsonscan

import (
	"encoding/json"
	"errors"
)

// errNotObject is SetField's answer to valid JSON that is not an object.
var errNotObject = errors.New("not a JSON object")

// SetField returns the JSON object obj with the field named key (spelled
// exactly so, as a map's key is matched) set to val: in the place of the
// first field of that name (later duplicates dropped), or last. Every
// other field keeps its place and its bytes, its key as written; a round
// trip through a map would sort the keys, compact the values and escape
// <, > and &. obj must be valid JSON; val is written as given.
func SetField(obj []byte, key string, val json.RawMessage) ([]byte, error) {
	if !json.Valid(obj) {
		var v any
		return nil, json.Unmarshal(obj, &v) // the decoder says what is wrong
	}
	i := SkipSpace(obj, 0)
	if obj[i] != '{' {
		return nil, errNotObject
	}
	out := make([]byte, 0, len(obj)+len(key)+len(val)+4)
	out = append(out, '{')
	found := false
	for i = SkipSpace(obj, i+1); obj[i] == '"'; {
		end, esc := StringEnd(obj, i+1)
		rawKey := obj[i : end+1]
		v := SkipSpace(obj, SkipSpace(obj, end+1)+1) // past the colon
		ve := ValueEnd(obj, v)
		value := obj[v:ve]
		if i = SkipSpace(obj, ve); obj[i] == ',' { // else the closing brace
			i = SkipSpace(obj, i+1)
		}
		if keyEquals(rawKey, esc, key) {
			if found {
				continue
			}
			found, value = true, val
		}
		out = appendField(out, rawKey, value)
	}
	if !found {
		kb, _ := json.Marshal(key) // a string always marshals
		out = appendField(out, kb, val)
	}
	return append(out, '}'), nil
}

func appendField(out, key, value []byte) []byte {
	if len(out) > 1 {
		out = append(out, ',')
	}
	return append(append(append(out, key...), ':'), value...)
}

// keyEquals reports whether rawKey, a key with its quotes, reads as key
// exactly.
func keyEquals(rawKey []byte, escaped bool, key string) bool {
	if !escaped {
		return string(rawKey[1:len(rawKey)-1]) == key
	}
	var s string
	return json.Unmarshal(rawKey, &s) == nil && s == key
}
